"""The end-of-run summary printed on the console, read back from the stage manifests.

Reading manifests (instead of keeping counters in the process) makes the summary right for a
resumed run too: stages finished by an earlier run report what they did then.
"""

from collections.abc import Iterable

import luigi

from skillsft.tasks.base import StageTask
from skillsft.tasks.failures import read_failure


def summary_lines(graph: Iterable[luigi.Task]) -> list[str]:
    from skillsft.schemas.report import SMOKE_TEST_NOTE

    lines = ["", "skillsft summary"]
    offline = False
    for task in graph:
        if not isinstance(task, StageTask):
            continue
        target = task.output()
        manifest = target.read_manifest() if target.exists() else None
        if manifest is None:
            failure = read_failure(task.output_file())
            state = "waiting for its batches" if failure and failure.waiting else "not finished"
            lines.append(f"  {task.stage_name():<10} {state}")
            continue
        shown = ", ".join(f"{k}={v}" for k, v in sorted(manifest.counts.items()))
        lines.append(f"  {task.stage_name():<10} {manifest.wall_seconds:>8.1f}s  {shown}")
        for usage in manifest.teacher:
            offline = offline or (usage.get("model") or "offline") == "offline"
            cost = usage.get("cost_usd")
            cost_text = "cost unknown" if cost is None else f"${cost:.4f}"
            lines.append(
                f"  {'':<10} teacher {usage.get('model') or 'offline'}: "
                f"new={usage.get('calls_new', 0)} cached={usage.get('calls_from_journal', 0)} "
                f"failed={usage.get('calls_failed', 0)} tokens="
                f"{usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)} {cost_text}"
            )
        lines.append(f"  {'':<10} -> {target.path}")
    if offline:
        lines += ["", f"  NOTE: {SMOKE_TEST_NOTE}"]
    return lines


def print_summary(graph: Iterable[luigi.Task]) -> None:
    print("\n".join(summary_lines(graph)))
