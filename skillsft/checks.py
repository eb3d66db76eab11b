"""Pre-flight checks of the teacher endpoint, before Luigi runs any stage.

For each model a stage that is about to run will ask (once per model): the endpoint answers,
accepts the key, serves the model (preflight.check_endpoint), and the response mode it accepts
is settled (one tiny probe, journaled and kept in the work dir, skipped when already known).
`skillsft check <env>` runs only this; `run` and the single-stage commands run it first. A run
that will publish (`--repo-id`) also checks the Hub token's write access first.
"""

from collections.abc import Iterable
from pathlib import Path

import luigi

from skillsft.pipeline.teacher.plan import TeacherPlan, preflight_teacher
from skillsft.schemas.stages import CORPUS_TEACHER_STAGES


def check_teacher(tasks: Iterable[luigi.Task]) -> list[str]:
    """Check every (endpoint, model) these tasks' teacher stages use; one line per model.
    Raises preflight.EndpointError (a ConfigError) with a one-line message on the first
    problem."""
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for task in tasks:
        stage = getattr(task, "stage", "")
        plan = getattr(task, "teacher", None)
        live = isinstance(plan, TeacherPlan) and plan.kind == "openai"
        if stage not in CORPUS_TEACHER_STAGES or not live:
            continue
        # The stage's own live teacher and runtime: what the pre-flight learns (endpoints
        # taken out, the response mode) is what the stage starts with.
        teacher = preflight_teacher(plan, stage, Path(task.work_dir))
        # Imported only when a live stage is about to run: it brings the openai client.
        from skillsft.pipeline.teacher.openai.endpoint_pool import check_endpoints

        if (teacher.endpoint, teacher.model) in seen:
            continue
        seen.add((teacher.endpoint, teacher.model))
        key = teacher.settings.api_key
        found, taken_out = check_endpoints(teacher.runtime.pool,
                                           key.get_secret_value() if key else "", teacher.model)
        lines.extend(taken_out)
        # Batch items are asked in the mode negotiated for the endpoint, like live calls: the
        # probe (one tiny live request, journaled) settles it for both.
        mode = teacher.negotiate()
        if task.stage_name() in plan.batch_stages:
            mode += " (batch items too)"
        listed = "listed" if found.listed else "no /models route"
        lines.append(f"{found.url} model {teacher.model}: {listed}, response mode {mode}")
    return lines


def check_publishing(tasks: Iterable[luigi.Task]) -> list[str]:
    """The Hub token and write access of a publish that is about to run (`--repo-id`), checked
    before any teacher stage pays; one line, or a ConfigError with a one-line message."""
    repos = {task.hub.repo_id for task in tasks if getattr(task, "stage", "") == "publish"
             and task.hub.repo_id}
    if not repos:
        return []
    from skillsft.pipeline.stages.hub_access import check_hub_access  # huggingface_hub: 0.4 s

    return [check_hub_access(repo_id) for repo_id in sorted(repos)]
