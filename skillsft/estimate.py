"""`skillsft estimate <env>` and the estimate `run --dry-run` prints: requests, tokens, dollars.

The estimate runs the very graph `run` would, in a scratch work dir under the real one, with a
teacher that pays nothing (pipeline.teacher.estimate): requests whose answers the real work
dir's journal holds are free, the others are counted and priced, and each is answered with the
journal's answer or an offline stand-in so that later stages render the requests they would
send. The scratch dir is wiped first, so every estimate starts from the journal as it is now.
"""

import argparse
import shutil
from typing import TYPE_CHECKING

import luigi

from skillsft.luigi_options import luigi_build_options
from skillsft.pipeline.teacher.estimate import (
    TOKEN_COUNT_METHOD,
    StageEstimate,
    read_estimates,
)
from skillsft.pipeline.teacher.pricing import prices_source
from skillsft.run_log import close_log, open_log
from skillsft.schemas.stages import TEACHER_STAGES
from skillsft.tasks.base import input_signatures_frozen

if TYPE_CHECKING:
    from skillsft.graph import RunPlan



def estimate_root(plan: "RunPlan", args: argparse.Namespace) -> list[StageEstimate]:
    """Price every teacher stage of the run `plan` describes without paying for anything."""
    from skillsft.graph import run_graph

    scratch_plan = plan.for_estimate()
    scratch = scratch_plan.work_dir
    shutil.rmtree(scratch, ignore_errors=True)
    task = run_graph(scratch_plan)
    log_path = open_log(scratch, "estimate", verbose=getattr(args, "verbose", False))
    try:
        options = {k: v for k, v in luigi_build_options(args).items() if k != "workers"}
        result = luigi.build([task], detailed_summary=True, **options)
    finally:
        close_log()
    if not result.scheduling_succeeded or any(not t.complete() for t in [task]):
        raise SystemExit(f"skillsft: the estimate could not finish; see {log_path}")
    found = {e.stage: e for e in read_estimates(scratch / "estimate")}
    return [found[name] for name in TEACHER_STAGES if name in found]


def estimate_lines(estimates: list[StageEstimate]) -> list[str]:
    header = (f"  {'stage':<10} {'model':<22} {'requests':>8} {'journal':>8} {'to send':>8} "
              f"{'input tok':>10} {'output tok':>10} {'USD live':>10} {'USD batch':>10}")
    lines = ["", "teacher cost estimate (nothing was sent)", header]
    total = StageEstimate(stage="total", model="")
    for item in estimates:
        total.add(item)
        lines.append(_row(item))
    lines.append(_row(total))
    unknown = sorted({e.model for e in estimates if e.usd_live is None})
    if unknown:
        lines.append(f"  no price for model {', '.join(unknown)}: its dollars are unknown; add "
                     "it with --prices FILE")
    lines.append(f"  prices: --prices where it names the model, else {prices_source()}; "
                 "batch at the Batch API's rates")
    lines.append(f"  {TOKEN_COUNT_METHOD}")
    return lines


def _row(item: StageEstimate) -> str:
    def usd(value: float | None) -> str:
        return "unknown" if value is None else f"{value:.4f}"

    return (f"  {item.stage:<10} {item.model:<22} {item.requests:>8} {item.in_journal:>8} "
            f"{item.to_send:>8} {item.input_tokens:>10} {item.output_tokens:>10} "
            f"{usd(item.usd_live):>10} {usd(item.usd_batch):>10}")


def estimate_command(plan: "RunPlan", args: argparse.Namespace) -> int:
    """Print the estimate for `skillsft estimate` and `run --dry-run`."""
    if plan.teacher.kind != "openai":
        print("skillsft: the offline teacher sends no requests and costs nothing; nothing to "
              "estimate")
        return 0
    with input_signatures_frozen():
        estimates = estimate_root(plan, args)
    print("\n".join(estimate_lines(estimates)))
    return 0
