"""The `skillsft` command: parse arguments, build the Luigi tasks, run them, set the exit code.

Every subcommand runs the same Luigi tasks as `skillsft run`; single stages only point them
at user-given input and output files. Precedence for every setting: flag, then environment
variable, then default (see README.md, "Configuration").
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from skillsft import __version__
from skillsft.arguments import (
    StrictParser,
    copy_arguments,
    non_negative_float,
    positive_float,
    positive_int,
)

# Everything heavier (Luigi, the stages, pydantic's schemas, the openai client, datasets) is
# imported by the functions that use it: `skillsft --version` and `--help` import none of it,
# and a command imports only what its own work needs (issue 20).
if TYPE_CHECKING:
    import luigi

    from skillsft import graph

def add_teacher_flags(parser: argparse.ArgumentParser, *, per_stage_models: bool) -> None:
    from skillsft.options_cli import argument_options, flag_of
    from skillsft.pipeline.options import declared
    from skillsft.pipeline.teacher.settings import TeacherSettings

    group = parser.add_argument_group("teacher")
    # The settings' own flags, from the settings model (as stage flags are from their options);
    # --model only where one model serves the command (`run` names one per stage, below).
    for item in declared(TeacherSettings):
        if item.name != "model" or not per_stage_models:
            group.add_argument(flag_of(item), **argument_options(item))
    group.add_argument("--prices", default=None, metavar="FILE",
                       help='JSON {"model": [usd_per_1M_input, usd_per_1M_output]} (cached and '
                       "batch rates optional) overriding the price data bundled with genai-prices")
    group.add_argument("--batch", nargs="?", const="all", default=None, metavar="STAGES",
                       help="send requests through the provider's Batch API at half price: "
                       "every teacher stage, or only STAGES (comma-separated, e.g. "
                       "memories,distill)")
    group.add_argument("--batch-wait", action="store_true",
                       help="with --batch: poll until the batches finish instead of exiting "
                       "with the stage waiting")
    group.add_argument("--batch-poll", type=positive_float, default=30.0, metavar="SECONDS",
                       help="seconds between polls while waiting (default 30)")
    group.add_argument("--shards", type=positive_int, default=None, metavar="N",
                       help="cut memories and distillation into N shard tasks that Luigi "
                       "workers share (default: one per --workers, at most one per 500 "
                       "trajectories; with a central scheduler one per 500 trajectories, at "
                       "most 16)")
    group.add_argument("--max-cost", type=non_negative_float, default=None, metavar="USD",
                       help="stop before a stage whose estimate would pass this budget, and "
                       "stop a running stage when the spend reaches it (answers are kept)")
    if per_stage_models:
        group.add_argument("--memory-model", default=None)
        group.add_argument("--aggregate-model", default=None)
        group.add_argument("--distill-model", default=None)


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    from skillsft.schemas.stages import STAGE_NAMES

    group = parser.add_argument_group("execution")
    group.add_argument("--workers", type=positive_int, default=None,
                       help="Luigi worker processes (default: the Luigi config's, else 1)")
    group.add_argument("--scheduler-url", default=None,
                       help="use a running luigid (default: the Luigi config's "
                       "default-scheduler-url, else an in-process scheduler)")
    group.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
    group.add_argument("--force", choices=STAGE_NAMES, action="append", default=[],
                       help="recompute STAGE and everything that depends on it")


def add_preference_commands(
    add_command: Callable[[str, str], argparse.ArgumentParser], envs: Callable[[], list[str]]
) -> None:
    """`preferences` (pairs from every episode) and `export-skills` (SKILL.md)."""
    prefs = add_command("preferences", "preference pairs from anchor states of every episode "
                        "(mixed envs included)")
    if not isinstance(prefs, _Unbuilt):
        prefs.add_argument("env", choices=envs())
        prefs.add_argument("--rollout-dir", default=None, help="default: $ROLLOUT_DIR, else the "
                           "bundled sample")
        prefs.add_argument("--skill-bank", required=True)
        prefs.add_argument("--output", required=True, help="the pairs file (.jsonl)")
        add_teacher_flags(prefs, per_stage_models=False)
        add_stage_flags(prefs, "preferences")
        add_run_flags(prefs)

    skills = add_command("export-skills", "the skill bank as a SKILL.md skill document")
    if isinstance(skills, _Unbuilt):
        return
    skills.add_argument("env", choices=envs())
    skills.add_argument("--skill-bank", required=True)
    skills.add_argument("--output", required=True, metavar="DIR",
                        help="writes DIR/<env>-skills/SKILL.md")


def add_evolve_command(
    add_command: Callable[[str, str], argparse.ArgumentParser], envs: Callable[[], list[str]]
) -> None:
    """`evolve`: one round of skill-bank evolution (skillsft/evolve_cli.py builds its graph)."""
    parser = add_command("evolve", "one round of skill-bank evolution: edits to a bank from "
                         "new rollouts, kept only when the gate's evaluator scores them higher")
    if isinstance(parser, _Unbuilt):
        return
    parser.add_argument("env", choices=envs())
    parser.add_argument("--skill-bank", required=True, metavar="CURRENT",
                        help="the bank to improve (ours, or a released claude_style_skills.json)")
    parser.add_argument("--rollout-dir", default=None, metavar="NEW",
                        help="the new rollouts (default: $ROLLOUT_DIR)")
    parser.add_argument("--work-dir", default=None,
                        help="default: $WORK_DIR, else ./runs/<env>; rounds go to "
                        "WORK_DIR/evolution/round-NNN/")
    add_teacher_flags(parser, per_stage_models=True)
    add_stage_flags(parser, "evolve")
    add_run_flags(parser)


def add_stage_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of every options model the command's tasks read (skillsft/command_options.py:
    the table, not the tasks, so that a command's help imports no Luigi)."""
    from skillsft.command_options import COMMAND_OPTIONS
    from skillsft.options_cli import add_option_flags

    add_option_flags(parser, COMMAND_OPTIONS[command].values())


def command_named(argv: Sequence[str]) -> str:
    """The subcommand of a command line: its first word that is not a flag (the `skillsft`
    command's own flags take no value), "" when there is none (`skillsft --help`)."""
    return next((arg for arg in argv if not arg.startswith("-")), "")


class _Unbuilt(StrictParser):
    """A subcommand's parser whose flags were not built: it was not the command given."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (`command` given) every subcommand by name and help line but
    only `command`'s flags: building the flags imports the stages that declare them, which
    `skillsft --help` and `skillsft --version` have no use for."""
    parser = StrictParser(prog="skillsft", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"skillsft {__version__}")
    common = StrictParser(add_help=False)
    common.add_argument("--verbose", action="store_true",
                        help="print tracebacks and Luigi's log on the console (always in "
                        "WORK_DIR/.skillsft/logs/)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=StrictParser)
    # `estimate` and `check` take `run`'s flags, copied from its parser.
    needs = {command, *(("run",) if command in ("estimate", "check") else ())}

    def add_command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub._parser_class = StrictParser if command is None or name in needs else _Unbuilt
        return sub.add_parser(name, help=help_text, description=help_text, parents=[common])

    def envs() -> list[str]:
        from skillsft.pipeline.envs import ENVS

        return sorted(ENVS)

    run = add_command("run", "run every stage for one environment")
    add_run_command(run, envs)
    estimate = add_command("estimate", "list per teacher stage the requests, tokens and dollars "
                           "`run` would spend (journal hits free); sends nothing")
    check = add_command("check", "check the teacher endpoint and models a run would use "
                        "(pre-flight only: nothing else runs)")
    for copy in (estimate, check):
        if not isinstance(copy, _Unbuilt):
            copy_arguments(run, copy)
    add_stage_commands(add_command, envs)
    return parser


def add_run_command(run: argparse.ArgumentParser, envs: Callable[[], list[str]]) -> None:
    if isinstance(run, _Unbuilt):
        return
    run.add_argument("env", choices=envs())
    run.add_argument("--rollout-dir", default=None, help="default: $ROLLOUT_DIR, else the "
                     "bundled sample")
    run.add_argument("--work-dir", default=None, help="default: $WORK_DIR, else ./runs/<env>")
    run.add_argument("--skill-bank", default=None, help="use this skill bank; skips stage 2")
    run.add_argument("--preferences", action="store_true",
                     help="also write <env>_preference_pairs.jsonl (and publish it)")
    add_teacher_flags(run, per_stage_models=True)
    add_stage_flags(run, "run")
    add_run_flags(run)


def add_stage_commands(add_command: Callable[[str, str], argparse.ArgumentParser],
                       envs: Callable[[], list[str]]) -> None:
    """The single-stage commands, the preference commands, `publish` and `report`."""
    parse = add_command("parse", "stage 1: rollout text -> processed trajectories")
    if not isinstance(parse, _Unbuilt):
        parse.add_argument("env", choices=envs())
        parse.add_argument("--rollout-dir", required=True)
        parse.add_argument("--output", required=True)
        add_stage_flags(parse, "parse")
        add_run_flags(parse)

    for name, help_text in (
        ("memories", "stage 2a: processed trajectories -> skill memories"),
        ("aggregate", "stage 2b: skill memories -> skill bank"),
        ("distill", "stage 3: trajectories + skill bank -> distilled conversations"),
        ("flatten", "stage 4: distilled conversations -> alpaca records"),
    ):
        stage = add_command(name, help_text)
        if isinstance(stage, _Unbuilt):
            continue
        stage.add_argument("env", choices=envs())
        stage.add_argument("--input", action="append", required=True,
                           help="input JSON (aggregate accepts several)")
        stage.add_argument("--output", required=True)
        if name == "distill":
            stage.add_argument("--skill-bank", required=True)
        if name != "flatten":
            add_teacher_flags(stage, per_stage_models=False)
        add_stage_flags(stage, name)
        add_run_flags(stage)

    add_preference_commands(add_command, envs)
    add_evolve_command(add_command, envs)

    publish = add_command("publish", "stage 5: export the corpus, upload to the Hub")
    if not isinstance(publish, _Unbuilt):
        publish.add_argument("--work-dir", required=True)
        publish.add_argument("--commit-message", default=None)
        publish.add_argument("--dry-run", action="store_true")
        add_stage_flags(publish, "publish")

    report = add_command("report", "write report.json and report.md for a work dir")
    if not isinstance(report, _Unbuilt):
        report.add_argument("--work-dir", required=True)
        add_stage_flags(report, "report")


def execute(root: luigi.Task, args: argparse.Namespace, plan: graph.RunPlan | None = None
            ) -> int:
    """Force, dry-run or build the graph under `root`; 0 only when every task completed.

    Inputs from outside the graph are signed, and fingerprints computed, once for the whole
    command, not at every `complete()` Luigi asks for."""
    from skillsft.tasks.base import input_signatures_frozen

    with input_signatures_frozen():
        return build_graph(root, args, plan)


def build_graph(root: luigi.Task, args: argparse.Namespace,
                plan: graph.RunPlan | None = None) -> int:
    import luigi
    from luigi.execution_summary import LuigiStatusCode

    from skillsft.checks import check_publishing, check_teacher
    from skillsft.luigi_options import luigi_build_options
    from skillsft.run_log import close_log, open_log
    from skillsft.summary import print_summary
    from skillsft.tasks.base import StageTask, walk_graph
    from skillsft.tasks.failures import clear_failure

    graph = list(walk_graph(root))
    stage_tasks = [t for t in graph if isinstance(t, StageTask)]
    forced = {t.task_id for t in stage_tasks if t.stage_name() in args.force}
    retried = {t.task_id for t in stage_tasks if t.complete() and t.output().teacher_failures()}
    for task in stage_tasks:
        if task.task_id in retried:
            print(f"skillsft: {task.stage_name()} had {task.output().teacher_failures()} failed "
                  "teacher requests last time; retrying them (answered ones come from the journal)")
    dirty = downstream_of(graph, forced | retried)
    pending = pending_tasks(root, graph, dirty)
    if not args.dry_run:
        for line in [*check_publishing(pending), *check_teacher(pending)]:
            print(f"skillsft: pre-flight: {line}")
    if args.dry_run:
        for task in graph:
            state = "would run" if task in pending else "up to date"
            where = task.output().path if isinstance(task, StageTask) else ""
            print(f"  {state:<10}  {task.get_task_family():<20} {where}")
        if plan is None:
            return 0
        from skillsft.estimate import estimate_command

        return estimate_command(plan, args)
    work_dir = Path(root.work_dir)
    # Processes joined by one central scheduler share the work dir (luigid gives each task to
    # one worker); a run with Luigi's in-process scheduler has it to itself.
    shared = not luigi_build_options(args).get("local_scheduler", False)
    with work_dir_lock(work_dir, shared=shared):
        log_path = open_log(work_dir, args.command, verbose=args.verbose)
        try:
            for task in stage_tasks:
                clear_failure(task.output_file())
                if task.task_id in dirty:
                    task.output().invalidate()
            result = luigi.build([root], detailed_summary=True, **luigi_build_options(args))
        finally:
            close_log()
        print_summary(graph)
    unfinished = [t for t in graph if not t.complete()]
    # Under a central scheduler, tasks that another process ran are "not run" here; every
    # task of the graph being complete is what counts.
    ok = {LuigiStatusCode.SUCCESS, LuigiStatusCode.SUCCESS_WITH_RETRY,
          *([LuigiStatusCode.NOT_RUN] if shared else [])}
    if result.status in ok and not unfinished:
        if not pending:
            print(f"skillsft: everything was up to date; nothing was recomputed ({work_dir})")
        return 0
    return explain_failure(unfinished, log_path)


def explain_failure(unfinished: Sequence[luigi.Task], log_path: Path) -> int:
    """One line per failed stage; exit 2 when the user fixes it in the configuration, else 1."""
    from skillsft.tasks.base import StageTask
    from skillsft.tasks.failures import read_failure

    failures = [f for t in unfinished if isinstance(t, StageTask)
                if (f := read_failure(t.output_file())) is not None]
    if failures and all(f.waiting for f in failures):
        for failure in failures:
            print(f"skillsft: {failure.stage} is waiting for its batches: {failure.message}")
        return 0
    for failure in failures:
        where = "" if failure.deliberate else f" (an unexpected error: traceback in {log_path})"
        print(f"skillsft: {failure.stage} failed: {failure.message}{where}", file=sys.stderr)
    not_done = ", ".join(t.get_task_family() for t in unfinished)
    if not failures:
        print(f"skillsft: the run did not finish (not done: {not_done}); the cause is in "
              f"{log_path}", file=sys.stderr)
    print("skillsft: finished stages are kept; fix the cause and re-run the same command.",
          file=sys.stderr)
    return 2 if any(f.configuration for f in failures) else 1


def pending_tasks(root: luigi.Task, graph: Sequence[luigi.Task],
                  dirty: set[str]) -> list[luigi.Task]:
    """The tasks Luigi will run: not complete (or made dirty), and reached from the root
    through such tasks only. The inputs of a complete task are never run for it: shards of
    another --shards count than the finished stage's are not pending."""
    from luigi.task import flatten

    reached: set[str] = set()

    def visit(task: luigi.Task) -> None:
        if task.task_id in reached or (task.task_id not in dirty and task.complete()):
            return
        reached.add(task.task_id)
        for dep in flatten(task.requires()):
            visit(dep)

    visit(root)
    return [t for t in graph if t.task_id in reached]


def downstream_of(graph: Sequence[luigi.Task], seeds: set[str]) -> set[str]:
    """The seed tasks and every task that depends on one of them, directly or not."""
    from luigi.task import flatten

    dirty: set[str] = set()
    for task in graph:  # dependencies come before dependants
        deps = flatten(task.requires())
        if task.task_id in seeds or any(dep.task_id in dirty for dep in deps):
            dirty.add(task.task_id)
    return dirty


@contextlib.contextmanager
def work_dir_lock(work_dir: Path, *, shared: bool = False) -> Iterator[None]:
    """One run per work dir at a time: two would overwrite each other's outputs and manifests.
    (Several Luigi workers of one run are fine: they share this run's lock.) `shared`: runs
    that go through one central scheduler, which never gives a task to two workers, may share
    the work dir with each other, never with a run on an in-process scheduler. A claim like
    every other lock (claims.py), so SKILLSFT_JOURNAL_CLAIMS=lease covers it on NFS/Lustre."""
    from skillsft.pipeline.teacher.claims import LEASE_SECONDS_VARIABLE, claims_for, try_hold
    from skillsft.pipeline.workdir import WorkDir
    from skillsft.settings import UsageError

    lock_path = WorkDir(work_dir).lock
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # claimed as `run`: the file is .skillsft/run.lock under flock, .skillsft/run.lease under lease
    claims = claims_for(lock_path.parent)
    hold = try_hold(claims, lock_path.stem, shared=shared,
                    waiting=lambda why: print(f"skillsft: {why} (at most "
                                              f"{LEASE_SECONDS_VARIABLE} seconds)",
                                              file=sys.stderr))
    if hold is None:
        raise UsageError(
            f"another skillsft run is using {work_dir}; wait for it to finish or use "
            "another --work-dir"
        )
    try:
        yield
    finally:
        hold.release()


def main(argv: Sequence[str] | None = None) -> int:
    """The `skillsft` command (`argv` None: the process's own arguments, and the process ends
    when this returns)."""
    as_program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(command_named(argv)).parse_args(argv)
    try:
        return run_command(args)
    finally:
        if as_program:
            # The interpreter's last collections over the heap a run leaves (the openai type
            # tree, pydantic schemas, Luigi's tasks) took 1-2 s after the summary; every
            # output is written, fsynced and closed by now, so they are skipped.
            gc.freeze()


def run_command(args: argparse.Namespace) -> int:
    """Dispatch a parsed command line; errors a user can fix become one line and an exit
    status (tracebacks only with --verbose)."""
    from skillsft.pipeline.errors import SkillsftError
    from skillsft.settings import UsageError
    from skillsft.tasks.failures import CONFIGURATION_ERRORS

    try:
        return dispatch(args)
    except KeyboardInterrupt:
        print("\nskillsft: interrupted; re-run the same command to continue (finished work "
              "and every journaled teacher answer are kept)", file=sys.stderr)
        return 130
    except (UsageError, *CONFIGURATION_ERRORS) as exc:
        if args.verbose:
            raise
        print(f"skillsft: {exc}", file=sys.stderr)
        return 2
    except SkillsftError as exc:
        if args.verbose:
            raise
        print(f"skillsft: {exc}", file=sys.stderr)
        return 1


def dispatch(args: argparse.Namespace) -> int:
    from skillsft.commands import DIRECT_COMMANDS

    if args.command in DIRECT_COMMANDS:  # publish/report/export-skills: no graph
        return DIRECT_COMMANDS[args.command](args)
    return dispatch_graph(args)


def dispatch_graph(args: argparse.Namespace) -> int:
    """The commands that build a Luigi graph."""
    from skillsft import graph
    from skillsft.checks import check_publishing, check_teacher
    from skillsft.tasks.base import walk_graph

    if args.command == "evolve":
        from skillsft.evolve_cli import evolve_graph, round_summary

        root, folder = evolve_graph(args, os.environ)
        code = execute(root, args)
        if code == 0 and not args.dry_run:
            print("\n".join(round_summary(folder)))
        return code
    plan = None
    if args.command in ("run", "estimate", "check"):
        plan = graph.run_plan(args, os.environ)
        root: luigi.Task = graph.run_graph(plan)
    else:
        root = graph.stage_graph(args, os.environ)
    if args.command == "check":
        everything = list(walk_graph(root))
        lines = [*check_publishing(everything), *check_teacher(everything)]
        lines = lines or ["the offline teacher needs no endpoint"]
        for line in lines:
            print(f"skillsft: check: {line}")
        return 0
    if args.command == "estimate":
        from skillsft.estimate import estimate_command  # imports the openai client: only here

        return estimate_command(plan, args)  # type: ignore[arg-type]
    return execute(root, args, plan)


if __name__ == "__main__":
    sys.exit(main())
