"""The `skillsft` command: parse arguments, build the Luigi tasks, run them, set the exit code.

Every subcommand runs the same Luigi tasks as `skillsft run`; single stages only point them
at user-given input and output files. Precedence for every setting: flag, then environment
variable, then default (see README.md, "Configuration").
"""

import argparse
import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import luigi
from luigi.execution_summary import LuigiStatusCode

from skillsft import settings
from skillsft.checks import check_teacher
from skillsft.pipeline.envs import ENVS
from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.teacher.settings import RESPONSE_FORMAT_CHOICES
from skillsft.tasks.base import StageTask, input_signatures_frozen, walk_graph
from skillsft.tasks.summary import print_summary
from skillsft.tasks.teacher import FORCED_STAGES_VARIABLE

STAGES = ("parse", "memories", "aggregate", "distill", "flatten", "report", "publish")
_OK = {LuigiStatusCode.SUCCESS, LuigiStatusCode.SUCCESS_WITH_RETRY}


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_selection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("selection (stage 1)")
    group.add_argument("--min-trajs-per-env", type=int, default=3)
    group.add_argument("--n-trajs-per-env", type=int, default=3)
    group.add_argument("--n-success-envs", type=int, default=70)
    group.add_argument("--n-fail-envs", type=int, default=30)
    group.add_argument("--include-mixed", action="store_true")
    group.add_argument("--failure-ratio", type=float, default=0.5, help="search: failures kept "
                       "per success")
    group.add_argument("--source-range", action="append", default=[], metavar="FIRST-LAST=SOURCE",
                       help="search: files numbered FIRST..LAST come from QA source SOURCE "
                       "(repeatable), for files not under a folder named after their source")


def add_teacher_flags(parser: argparse.ArgumentParser, *, per_stage_models: bool) -> None:
    group = parser.add_argument_group("teacher")
    group.add_argument("--teacher", choices=["offline", "openai"], default=None,
                       help="default: $SKILLSFT_TEACHER, else openai when an API key is set")
    group.add_argument("--base-url", default=None, help="default: $OPENAI_BASE_URL")
    group.add_argument("--concurrency", type=int, default=None,
                       help="max requests in flight (default: $SKILLSFT_CONCURRENCY or 16)")
    group.add_argument("--max-concurrency", type=positive_int, default=None,
                       help="how far the in-flight limit may grow while the server keeps up "
                       "(default 64; it halves on each 429)")
    group.add_argument("--rpm", type=positive_int, default=None,
                       help="cap on requests started per minute")
    group.add_argument("--tpm", type=positive_int, default=None,
                       help="cap on tokens (prompt estimate + max output) per minute")
    group.add_argument("--response-format", choices=RESPONSE_FORMAT_CHOICES, default=None,
                       help="how answers are constrained: auto (default) probes the server once "
                       "per endpoint and model; any other value forces that mode")
    group.add_argument("--max-output-tokens", type=positive_int, default=None,
                       help="max tokens per teacher answer (default 4096)")
    group.add_argument("--retry-failed", type=int, default=None, metavar="N",
                       help="runs that call a request again after a transient failure "
                       "(timeout, 5xx; default 2); --force STAGE retries every failure")
    group.add_argument("--request-deadline", type=float, default=None, metavar="SECONDS",
                       help="give a request up after this long, retries included (default: "
                       "every attempt's timeout plus the backoffs; printed at the start)")
    group.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                       help="per HTTP call to the teacher (default 120; a slow local server "
                       "that keeps working on abandoned calls needs more)")
    group.add_argument("--prices", default=None, metavar="FILE",
                       help='JSON {"model": [usd_per_1M_input, usd_per_1M_output]} overriding '
                       "the built-in price table")
    if per_stage_models:
        group.add_argument("--memory-model", default=None)
        group.add_argument("--aggregate-model", default=None)
        group.add_argument("--distill-model", default=None)
    else:
        group.add_argument("--model", default=None)


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("execution")
    group.add_argument("--workers", type=int, default=1, help="Luigi worker processes")
    group.add_argument("--scheduler-url", default=None,
                       help="use a running luigid (default: local scheduler)")
    group.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
    group.add_argument("--force", choices=STAGES, action="append", default=[],
                       help="recompute STAGE and everything that depends on it")


# Each stage flag, and the stages it means something to (a single-stage command offers only its
# own; `run` offers all).
STAGE_FLAGS: tuple[tuple[tuple[str, ...], str, dict[str, object]], ...] = (
    (("memories",), "--all-trajectories",
     {"action": "store_true", "help": "one memory per kept trajectory, not per env"}),
    (("memories", "aggregate", "distill"), "--max-failure-rate",
     {"type": float, "default": 0.10,
      "help": "fail the stage when a larger share of its items fail (default 0.10)"}),
    (("aggregate",), "--batch-size",
     {"type": positive_int, "default": 40, "help": "max items merged per teacher call"}),
    (("distill", "flatten"), "--history",
     {"type": positive_int, "default": 5, "help": "(observation, action) pairs per turn"}),
    (("distill",), "--seed", {"type": int, "default": 0, "help": "seed of the done turn"}),
    (("distill",), "--actions-only-history",
     {"action": "store_true", "help": "search: no retrieved information in the history"}),
)


def add_stage_flags(parser: argparse.ArgumentParser, stage: str | None = None) -> None:
    """The stage flags `stage` uses (all of them for `run`)."""
    for stages, flag, options in STAGE_FLAGS:
        if stage is None or stage in stages:
            parser.add_argument(flag, **options)  # type: ignore[arg-type]


def add_run_env_flags(run: argparse.ArgumentParser, envs: list[str]) -> None:
    """What `run` (and `check`, which checks what `run` would use) takes besides the groups."""
    run.add_argument("env", choices=envs)
    run.add_argument("--rollout-dir", default=None, help="default: $ROLLOUT_DIR, else the "
                     "bundled sample")
    run.add_argument("--work-dir", default=None, help="default: $WORK_DIR, else ./runs/<env>")
    run.add_argument("--skill-bank", default=None, help="use this skill bank; skips stage 2")
    run.add_argument("--repo-id", default=None, help="publish to this Hub dataset repo at the end")
    run.add_argument("--private", action="store_true", help="with --repo-id: a private repo")
    run.add_argument("--revision", default=None, help="with --repo-id: the branch to commit to")
    run.add_argument("--validation-fraction", type=float, default=0.0,
                     help="with --repo-id: share of trajectories held out as a validation split")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skillsft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    envs = sorted(ENVS)

    run = sub.add_parser("run", help="run every stage for one environment")
    check = sub.add_parser("check", help="check the teacher endpoint and models a run would "
                           "use (pre-flight only: nothing else runs)")
    for parser_ in (run, check):
        add_run_env_flags(parser_, envs)
    add_teacher_flags(check, per_stage_models=True)
    add_selection_flags(check)
    add_stage_flags(check)
    add_run_flags(check)

    add_selection_flags(run)
    add_teacher_flags(run, per_stage_models=True)
    add_stage_flags(run)
    add_run_flags(run)

    parse = sub.add_parser("parse", help="stage 1: rollout text -> processed trajectories")
    parse.add_argument("env", choices=envs)
    parse.add_argument("--rollout-dir", required=True)
    parse.add_argument("--output", required=True)
    add_selection_flags(parse)
    add_run_flags(parse)

    for name, help_text in (
        ("memories", "stage 2a: processed trajectories -> skill memories"),
        ("aggregate", "stage 2b: skill memories -> skill bank"),
        ("distill", "stage 3: trajectories + skill bank -> distilled conversations"),
        ("flatten", "stage 4: distilled conversations -> alpaca records"),
    ):
        stage = sub.add_parser(name, help=help_text)
        stage.add_argument("env", choices=envs)
        stage.add_argument("--input", action="append", required=True,
                           help="input JSON (aggregate accepts several)")
        stage.add_argument("--output", required=True)
        if name == "distill":
            stage.add_argument("--skill-bank", required=True)
        if name != "flatten":
            add_teacher_flags(stage, per_stage_models=False)
        add_stage_flags(stage, name)
        add_run_flags(stage)

    publish = sub.add_parser("publish", help="stage 5: export the corpus, upload to the Hub")
    publish.add_argument("--work-dir", required=True)
    publish.add_argument("--repo-id", default=None)
    publish.add_argument("--private", action="store_true")
    publish.add_argument("--revision", default=None)
    publish.add_argument("--commit-message", default=None)
    publish.add_argument("--validation-fraction", type=float, default=0.0)
    publish.add_argument("--dry-run", action="store_true")

    report = sub.add_parser("report", help="write report.json and report.md for a work dir")
    report.add_argument("--work-dir", required=True)
    return parser


def execute(root: luigi.Task, args: argparse.Namespace) -> int:
    """Force, dry-run or build the graph under `root`; 0 only when every task completed.

    Inputs from outside the graph are signed once for the whole command, not at every
    fingerprint Luigi asks for."""
    with input_signatures_frozen():
        return build_graph(root, args)


def build_graph(root: luigi.Task, args: argparse.Namespace) -> int:
    graph = list(walk_graph(root))
    forced = {t.task_id for t in graph if isinstance(t, StageTask) and t.stage_name() in args.force}
    retried = {t.task_id for t in graph if isinstance(t, StageTask) and t.complete()
               and t.output().teacher_failures()}
    for task in graph:
        if task.task_id in retried:
            print(f"skillsft: {task.stage_name()} had {task.output().teacher_failures()} failed "
                  "teacher requests last time; retrying them (answered ones come from the journal)")
    os.environ[FORCED_STAGES_VARIABLE] = ",".join(args.force)
    dirty = downstream_of(graph, forced | retried)
    if not args.dry_run:
        for line in check_teacher(t for t in graph if t.task_id in dirty or not t.complete()):
            print(f"skillsft: pre-flight: {line}")
    if args.dry_run:
        for task in graph:
            state = "would run" if task.task_id in dirty or not task.complete() else "up to date"
            where = task.output().path if isinstance(task, StageTask) else ""
            print(f"  {state:<10}  {task.get_task_family():<20} {where}")
        return 0
    with work_dir_lock(Path(root.work_dir)):
        for task in graph:
            if task.task_id in dirty and isinstance(task, StageTask):
                task.output().invalidate()
        result = luigi.build([root], detailed_summary=True, **luigi_settings(args))
        print_summary(graph)
    unfinished = [t.get_task_family() for t in graph if not t.complete()]
    if result.status not in _OK or unfinished:
        print(f"skillsft: the run did not finish ({result.status.name}; not done: "
              f"{', '.join(unfinished) or 'none'}); see the messages above, fix the cause and "
              "re-run: finished work is kept.", file=sys.stderr)
        return 1
    return 0


def luigi_settings(args: argparse.Namespace) -> dict[str, object]:
    params: dict[str, object] = {"workers": args.workers, "log_level": "WARNING"}
    if args.scheduler_url:
        params["scheduler_url"] = args.scheduler_url
    else:
        params["local_scheduler"] = True
    return params


def downstream_of(graph: Sequence[luigi.Task], seeds: set[str]) -> set[str]:
    """The seed tasks and every task that depends on one of them, directly or not."""
    dirty: set[str] = set()
    for task in graph:  # dependencies come before dependants
        deps = luigi.task.flatten(task.requires())
        if task.task_id in seeds or any(dep.task_id in dirty for dep in deps):
            dirty.add(task.task_id)
    return dirty


@contextlib.contextmanager
def work_dir_lock(work_dir: Path) -> Iterator[None]:
    """One run per work dir at a time: two would overwrite each other's outputs and manifests.
    (Several Luigi workers of one run are fine: they share this run's lock.)"""
    lock_path = work_dir / ".skillsft" / "run.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise settings.UsageError(
                f"another skillsft run is using {work_dir}; wait for it to finish or use "
                "another --work-dir"
            ) from None
        yield


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        root = settings.build_root_task(args, os.environ)
    except settings.UsageError as exc:
        print(f"skillsft: {exc}", file=sys.stderr)
        return 2
    except settings.CommandDone as done:  # publish/report ran directly
        return done.status
    try:
        if args.command == "check":
            lines = check_teacher(walk_graph(root)) or ["the offline teacher needs no endpoint"]
            for line in lines:
                print(f"skillsft: check: {line}")
            return 0
        return execute(root, args)
    except (settings.UsageError, ConfigError) as exc:
        print(f"skillsft: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
