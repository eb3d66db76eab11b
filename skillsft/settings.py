"""Resolve what a command runs with: the rollout folder and the teacher, from flags and the
environment (flag > variable > default), once per command.

The teacher's own precedence lives in `pipeline.teacher.settings`; the result is a
`TeacherPlan` without secrets that every stage task of the command receives. The graph itself
is composed in skillsft/graph.py.
"""

import argparse
import difflib
import os
import uuid
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from skillsft.pipeline.options import declared
from skillsft.pipeline.teacher.plan import TeacherPlan
from skillsft.pipeline.teacher.pricing import load_price_file
from skillsft.pipeline.teacher.settings import (
    FIELD_VARIABLES,
    TEACHER_CHOICES,
    MissingApiKey,
    TeacherSettings,
    announce,
    require_api_key,
)
from skillsft.schemas.stages import CORPUS_TEACHER_STAGES

# The samples ship inside the package (skillsft.examples), so an installed wheel runs them too.
BUNDLED_SAMPLES = Path(str(resources.files("skillsft.examples"))) / "rollouts"


class UsageError(Exception):
    """A command line or environment that cannot work; the message says what to change."""


def resolve_rollout_dir(args: argparse.Namespace, environ: Mapping[str, str]) -> Path:
    if args.rollout_dir:
        return Path(args.rollout_dir)
    if environ.get("ROLLOUT_DIR"):
        return Path(environ["ROLLOUT_DIR"])
    sample = BUNDLED_SAMPLES / args.env
    print(f"skillsft: ROLLOUT_DIR is not set; using the bundled sample {sample}")
    return sample


def check_rollouts(path: Path, env: str) -> None:
    """Fail at once, before any work or teacher call (pre-flight probes included), when there
    is nothing to parse or the folder holds another environment's dump (the parse stage's own
    check, so one message and one error whoever runs it)."""
    from skillsft.pipeline.envs import ENVS
    from skillsft.pipeline.stages.parse import check_rollouts as check

    check(path, ENVS[env])


def joined_urls(given: str | list[str] | None) -> str | None:
    """`--base-url` given once or more, as the one comma-separated base URL setting."""
    if given is None or isinstance(given, str):
        return given
    return ",".join(given) or None


def resolve_teacher(args: argparse.Namespace, environ: Mapping[str, str]) -> TeacherPlan:
    """The teacher of this command, resolved once (flags > variables > defaults) and handed to
    every stage task as one plan; the API key is deliberately not in it."""
    prices = getattr(args, "prices", None)
    if prices and not Path(prices).is_file():
        raise UsageError(f"--prices {prices} is not a file")
    if prices:
        load_price_file(Path(prices))  # a malformed table fails now, not inside a stage
    # Every settings flag by its field name (cli.py made them from the model), then the two
    # that need more than their value: the URL list joined, the price file made absolute.
    explicit: dict[str, Any] = {item.name: getattr(args, item.name, None)
                                for item in declared(TeacherSettings)}
    explicit["base_url"] = joined_urls(explicit["base_url"])
    explicit["price_file"] = str(Path(prices).resolve()) if prices else None
    try:
        resolved = TeacherSettings.resolve(environ, **explicit)
    except ValidationError as exc:
        raise UsageError(describe_settings_error(exc, explicit, environ)) from None
    if resolved.teacher == "openai":
        try:
            require_api_key(resolved)
        except MissingApiKey as missing:
            raise UsageError(str(missing)) from None
    models: dict[str, str] = {}
    for stage, flag in (("memory", "memory_model"), ("aggregate", "aggregate_model"),
                        ("distill", "distill_model")):
        models[flag] = getattr(args, flag, None) or resolved.model_for(stage)
    # The banner names the models this command's stages really use (`run`: all three).
    own = {"memories": "memory_model", "aggregate": "aggregate_model",
           "distill": "distill_model", "preferences": "distill_model"}.get(args.command)
    shown = {args.command: models[own]} if own else {
        stage: models[f"{stage}_model"] for stage in ("memory", "aggregate", "distill")}
    print(f"skillsft: {announce(resolved, 'this run', shown)}")
    return TeacherPlan.public(resolved, models, os.environ, **batch_run(args, resolved),
                              forced_stages=tuple(getattr(args, "force", None) or ()))


TEACHER_STAGES = CORPUS_TEACHER_STAGES  # what --batch may name


def batch_run(args: argparse.Namespace, resolved: TeacherSettings) -> dict[str, Any]:
    """--batch [STAGES]: all teacher stages, or the named ones; a single-stage command's own."""
    chosen = getattr(args, "batch", None)
    if chosen is None:
        stages: tuple[str, ...] = ()
    elif chosen == "all":
        stages = TEACHER_STAGES if args.command == "run" else (args.command,)
    else:
        stages = tuple(name.strip() for name in chosen.split(",") if name.strip())
        unknown = [name for name in stages if name not in TEACHER_STAGES]
        if unknown:
            raise UsageError(f"--batch {chosen}: {', '.join(unknown)} is not a teacher stage "
                             f"(choose from {', '.join(TEACHER_STAGES)})")
    if stages and resolved.teacher != "openai":
        raise UsageError("--batch needs the openai teacher (an API key, or --teacher openai); "
                         "the offline teacher answers at once and for free")
    max_cost = getattr(args, "max_cost", None)
    return {"batch_stages": stages, "batch_wait": bool(getattr(args, "batch_wait", False)),
            "batch_poll": getattr(args, "batch_poll", 30.0), "max_cost": max_cost,
            # this command's spend, kept apart from any other command's
            "spend_id": uuid.uuid4().hex if max_cost is not None else ""}


def describe_settings_error(
    exc: ValidationError, explicit: Mapping[str, object], environ: Mapping[str, str]
) -> str:
    """Name the flag or variable that gave the bad value, in one line per problem."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        if explicit.get(field) is not None:
            source = f"--{field.replace('_', '-')} {explicit[field]}"
        else:
            variable = next((v for v in FIELD_VARIABLES.get(field, ()) if environ.get(v)), None)
            source = f"{variable}={environ[variable]}" if variable else field
        expected = error["msg"].split(",")[0].removeprefix("Input should be ")
        hint = ""
        choices = TEACHER_CHOICES if field == "teacher" else ()
        close = difflib.get_close_matches(str(error.get("input", "")), choices, n=1)
        if close:
            hint = f" (did you mean {close[0]}?)"
        problems.append(f"{source}: must be {expected}{hint}")
    return "; ".join(problems)


# A processed trajectory takes about this many bytes of JSON (measured: 18.2 MB for 2,100
# ALFWorld trajectories):
# enough to size the default shard count of a single-stage command without reading its input.
BYTES_PER_TRAJECTORY = 8_700


def shard_count(args: argparse.Namespace, trajectories: int) -> int:
    """--shards, or the default for a corpus of this many trajectories and this command's
    workers."""
    from skillsft.luigi_options import local_workers
    from skillsft.pipeline.stages.shards import auto_shards

    return getattr(args, "shards", None) or auto_shards(trajectories, local_workers(args))


def trajectory_files(rollout_dir: Path) -> int:
    """How many rollout files (one trajectory each) a rollout folder holds."""
    return sum(len(files) for _, _, files in os.walk(rollout_dir))


def estimated_trajectories(path: Path) -> int:
    return path.stat().st_size // BYTES_PER_TRAJECTORY
