"""Build the Luigi graph of a command from its parsed arguments: which tasks, fed by which.

Each task carries only what it reads (its inputs and its own options objects); this module
composes them. The options objects come from the flags through their models
(skillsft/options_cli.py), the teacher plan is resolved once for the whole command
(skillsft/settings.py), and the rollout folder is checked once, here, before any work.
"""

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import luigi

from skillsft.options_cli import options_from_args
from skillsft.pipeline.teacher.plan import TeacherPlan
from skillsft.settings import (
    UsageError,
    check_rollouts,
    estimated_trajectories,
    resolve_rollout_dir,
    resolve_teacher,
    shard_count,
    trajectory_files,
)
from skillsft.tasks.base import InputFile, StageTask
from skillsft.tasks.options_param import OptionsParameter
from skillsft.tasks.preferences import PreferencePairs, SkillDocument
from skillsft.tasks.publish import PublishCorpus
from skillsft.tasks.report import BuildReport
from skillsft.tasks.run import RunEnv
from skillsft.tasks.shards import sharded
from skillsft.tasks.stages import (
    SINGLE_STAGE_TASKS,
    AggregateSkillBank,
    Distill,
    Flatten,
    GenerateMemories,
    ParseRollouts,
)
from skillsft.tasks.teacher import TeacherParameter

RUN_TASKS: tuple[type[StageTask], ...] = (
    ParseRollouts, GenerateMemories, AggregateSkillBank, Distill, Flatten, SkillDocument,
    PreferencePairs, BuildReport, PublishCorpus,
)
# The tasks whose options each command offers as flags (`run`, `estimate`, `check`: all).
COMMAND_TASKS: dict[str, tuple[type[StageTask], ...]] = {
    "run": RUN_TASKS,
    "parse": (ParseRollouts,),
    **{name: (task,) for name, task in SINGLE_STAGE_TASKS.items()},
    "preferences": (PreferencePairs,),
    "report": (BuildReport,),
    "publish": (BuildReport, PublishCorpus),
}


def options_models(*tasks: type[StageTask]) -> dict[str, type]:
    """The options classes these tasks read, by parameter name (the teacher plan aside: its
    flags carry the environment-variable precedence, skillsft/settings.py)."""
    found: dict[str, type] = {}
    for task in tasks:
        for name, param in task.get_params():
            if isinstance(param, OptionsParameter) and not isinstance(param, TeacherParameter):
                found.setdefault(name, param.options_cls)
    return found


def options_of(command: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every options object of a command, built from its flags."""
    models = options_models(*COMMAND_TASKS[command])
    return {name: options_from_args(model, args) for name, model in models.items()}


@dataclass(frozen=True)
class RunPlan:
    """Everything `run` (and `estimate`, `check`) builds its graph from, resolved."""

    env: str
    work_dir: Path
    rollout_dir: Path
    teacher: TeacherPlan
    options: dict[str, Any] = field(default_factory=dict)
    skill_bank: str = ""
    preferences: bool = False
    shards: int = 1  # memories and distillation each cut into this many shard tasks

    def for_estimate(self) -> "RunPlan":
        """The same graph in a scratch work dir, pricing instead of paying, never publishing."""
        from skillsft.pipeline.stages.publish_options import HubOptions
        from skillsft.pipeline.workdir import WorkDir

        teacher = self.teacher.model_copy(update={
            "estimate_for": str(self.work_dir.resolve()), "batch_stages": (), "max_cost": None})
        return replace(self, work_dir=WorkDir(self.work_dir).estimate_scratch, teacher=teacher,
                       options={**self.options, "hub": HubOptions()})


def run_graph(plan: RunPlan) -> RunEnv:
    o = plan.options
    place = {"env": plan.env, "work_dir": str(plan.work_dir)}
    common = {**place, "failure": o["failure"]}  # the stages that count failures
    parse = ParseRollouts(**common, rollout_dir=str(plan.rollout_dir), selection=o["selection"])
    bank: luigi.Task
    if plan.skill_bank:
        bank = InputFile(path=plan.skill_bank, role="skill_bank")
    else:
        memories = sharded(GenerateMemories, plan.shards, (parse,), **common,
                           teacher=plan.teacher, memories=o["memories"])
        bank = AggregateSkillBank(**common, inputs=(memories,), teacher=plan.teacher,
                                  aggregate=o["aggregate"])
    distill = sharded(Distill, plan.shards, (parse, bank), **common, teacher=plan.teacher,
                      distill=o["distill"])
    flatten = Flatten(**common, inputs=(distill,), flatten=o["flatten"])
    pairs = [PreferencePairs(**common, inputs=(bank,), rollout_dir=str(plan.rollout_dir),
                             teacher=plan.teacher, distill=o["distill"])
             ] if plan.preferences else []
    skills = SkillDocument(**place, inputs=(bank,))
    report = BuildReport(**place, inputs=(flatten, skills, *pairs), report=o["report"])
    wanted: list[luigi.Task] = [report]
    if o["hub"].repo_id:
        wanted.append(PublishCorpus(**place, inputs=(report,), hub=o["hub"], card=o["card"],
                                    report=o["report"]))
    return RunEnv(work_dir=str(plan.work_dir), wanted=tuple(wanted))


def check_fit_cutoff(options: dict[str, Any], env: str) -> None:
    """--fit-cutoff with a cutoff no record can fit: a usage error before any teacher call."""
    from skillsft.pipeline.envs import get_env
    from skillsft.pipeline.errors import ConfigError
    from skillsft.pipeline.stages.flatten import check_cutoff

    if "flatten" in options:
        try:
            check_cutoff(options["flatten"].fit, get_env(env))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None


def run_plan(args: argparse.Namespace, environ: Mapping[str, str]) -> RunPlan:
    rollout_dir = resolve_rollout_dir(args, environ)
    check_rollouts(rollout_dir, args.env)
    if args.skill_bank and not Path(args.skill_bank).is_file():
        raise UsageError(f"--skill-bank {args.skill_bank} is not a file")
    options = options_of("run", args)
    check_fit_cutoff(options, args.env)
    return RunPlan(
        env=args.env,
        work_dir=Path(args.work_dir or environ.get("WORK_DIR") or Path("runs") / args.env),
        rollout_dir=rollout_dir,
        teacher=resolve_teacher(args, environ),
        options=options,
        skill_bank=args.skill_bank or "",
        preferences=args.preferences,
        shards=shard_count(args, trajectory_files(rollout_dir)),
    )


def stage_graph(args: argparse.Namespace, environ: Mapping[str, str]) -> StageTask:
    """A single-stage command: the same task `run` builds, fed by the user's files."""
    command = args.command
    output = Path(args.output)
    common: dict[str, Any] = {"env": args.env, "work_dir": str(output.parent),
                              "output_path": str(output), **options_of(command, args)}
    if command == "parse":
        rollout_dir = Path(args.rollout_dir)
        check_rollouts(rollout_dir, args.env)
        return ParseRollouts(**common, rollout_dir=str(rollout_dir))
    if command == "preferences":
        rollout_dir = resolve_rollout_dir(args, environ)
        check_rollouts(rollout_dir, args.env)
        return PreferencePairs(**common, rollout_dir=str(rollout_dir),
                               inputs=(bank_file(args.skill_bank),), require_pairs=True,
                               teacher=resolve_teacher(args, environ))
    inputs = [str(Path(p)) for p in args.input]
    if len(inputs) > 1 and command != "aggregate":
        raise UsageError(f"{command} reads one --input file, got {len(inputs)}; only "
                         "aggregate merges several")
    for path in inputs:
        if not Path(path).is_file():
            raise UsageError(f"input file {path} does not exist")
    files: list[luigi.Task] = [InputFile(path=p) for p in inputs]
    if command == "distill":
        files.append(bank_file(args.skill_bank))
    task_cls = SINGLE_STAGE_TASKS[command]
    if command != "flatten":
        common["teacher"] = resolve_teacher(args, environ)
    if task_cls in (GenerateMemories, Distill):
        shards = shard_count(args, estimated_trajectories(Path(inputs[0])))
        return sharded(task_cls, shards, tuple(files), **common)
    return task_cls(**common, inputs=tuple(files))


def bank_file(path: str) -> InputFile:
    if not Path(path).is_file():
        raise UsageError(f"--skill-bank {path} is not a file")
    return InputFile(path=str(path), role="skill_bank")
