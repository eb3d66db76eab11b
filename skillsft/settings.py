"""Turn parsed arguments plus environment variables into the root Luigi task of a command.

This is where the precedence flag > variable > default is applied for the run settings
(ROLLOUT_DIR, WORK_DIR); the teacher's own settings apply the same order in
`pipeline.teacher.settings`. Every value is resolved here, before Luigi sees it, so the value
that shaped an output is the one in its fingerprint.
"""

import argparse
import difflib
import os
import uuid
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import luigi
from pydantic import ValidationError

from skillsft.pipeline.teacher.openai.endpoints import hand_over, redact_url
from skillsft.pipeline.teacher.pricing import load_price_file
from skillsft.pipeline.teacher.settings import (
    FIELD_VARIABLES,
    TEACHER_CHOICES,
    TeacherSettings,
    announce,
)

# The samples ship inside the package (skillsft.examples), so an installed wheel runs them too.
BUNDLED_SAMPLES = Path(str(resources.files("skillsft.examples"))) / "rollouts"


class CommandDone(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A command that ran directly, without a Luigi graph; carries its exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


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
    is nothing to parse or the folder holds another environment's dump."""
    from skillsft.pipeline.envs import ENVS
    from skillsft.pipeline.envs.dump_kind import check_environment

    check_rollout_dir(path)
    check_environment(path, ENVS[env], list(ENVS.values()))


def check_rollout_dir(path: Path) -> None:
    """Fail at once, before any work, when there is nothing to parse."""
    if not path.is_dir():
        raise UsageError(
            f"rollout folder {path} does not exist; set ROLLOUT_DIR or --rollout-dir to the "
            "folder holding your rollout text files (envNNN/*.txt, or search question files)"
        )
    if not any(p.suffix == ".txt" for p in path.rglob("*.txt")):
        raise UsageError(
            f"rollout folder {path} holds no .txt rollout files; expected envNNN/<name>.txt "
            "(ALFWorld/WebShop) or one .txt file per question (Search)"
        )


def joined_urls(given: str | list[str] | None) -> str | None:
    """`--base-url` given once or more, as the one comma-separated base URL setting."""
    if given is None or isinstance(given, str):
        return given
    return ",".join(given) or None


def teacher_params(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, object]:
    """The Luigi teacher parameters, fully resolved; the API key is deliberately not among them."""
    explicit = {
        "teacher": getattr(args, "teacher", None),
        "base_url": joined_urls(getattr(args, "base_url", None)),
        "concurrency": getattr(args, "concurrency", None),
        "model": getattr(args, "model", None),
        "timeout": getattr(args, "timeout", None),
        "request_deadline": getattr(args, "request_deadline", None),
    }
    try:
        resolved = TeacherSettings.resolve(environ, **explicit)
    except ValidationError as exc:
        raise UsageError(describe_settings_error(exc, explicit, environ)) from None
    if resolved.teacher == "openai" and resolved.api_key is None:
        raise UsageError(
            "the openai teacher needs an API key: set OPENAI_API_KEY (or DEEPSEEK_API_KEY; any "
            "non-empty value for a local server that ignores keys), or use --teacher offline"
        )
    prices = getattr(args, "prices", None)
    if prices and not Path(prices).is_file():
        raise UsageError(f"--prices {prices} is not a file")
    if prices:
        load_price_file(Path(prices))  # a malformed table fails now, not inside a stage
    params: dict[str, object] = {
        "teacher": resolved.teacher,
        "base_url": redact_url(resolved.endpoint()) if resolved.teacher == "openai" else "",
        "base_url_digest": (hand_over(resolved.endpoint(), os.environ)
                            if resolved.teacher == "openai" else ""),
        "concurrency": resolved.concurrency,
        "max_concurrency": getattr(args, "max_concurrency", None) or 64,
        "rpm": getattr(args, "rpm", None) or 0,
        "tpm": getattr(args, "tpm", None) or 0,
        "prices": str(Path(prices).resolve()) if prices else "",
        "response_format": getattr(args, "response_format", None) or "auto",
        "max_output_tokens": getattr(args, "max_output_tokens", None) or 4096,
        "timeout": getattr(args, "timeout", None) or 120.0,
        "request_deadline": getattr(args, "request_deadline", None) or 0.0,
        "retry_failed": 2 if getattr(args, "retry_failed", None) is None else args.retry_failed,
    }
    models: dict[str, str] = {}
    for stage, flag in (("memory", "memory_model"), ("aggregate", "aggregate_model"),
                        ("distill", "distill_model")):
        models[stage] = getattr(args, flag, None) or resolved.model_for(stage)
        params[flag] = models[stage] if resolved.teacher == "openai" else ""
    # The banner names the models this command's stages really use (`run`: all three).
    own_stage = {"memories": "memory"}.get(args.command, args.command)
    shown = {own_stage: models[own_stage]} if own_stage in models else models
    params.update(batch_params(args, resolved))
    print(f"skillsft: {announce(resolved, 'this run', shown)}")
    return params


TEACHER_STAGES = ("memories", "aggregate", "distill")


def batch_params(args: argparse.Namespace, resolved: TeacherSettings) -> dict[str, object]:
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


def selection_params(args: argparse.Namespace) -> dict[str, object]:
    from skillsft.pipeline.selection import SourceRange

    for text in args.source_range:
        try:
            SourceRange.parse(text)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise UsageError(f"--source-range {text}: {reason}") from None
        except ValueError as exc:
            raise UsageError(f"--source-range: {exc}") from None
    return {
        "min_trajs_per_env": args.min_trajs_per_env,
        "n_trajs_per_env": args.n_trajs_per_env,
        "n_success_envs": args.n_success_envs,
        "n_fail_envs": args.n_fail_envs,
        "include_mixed": args.include_mixed,
        "label_min_outcomes": args.label_min_outcomes,
        "failure_ratio": args.failure_ratio,
        "source_ranges": tuple(args.source_range),
    }


def stage_params(args: argparse.Namespace) -> dict[str, object]:
    """The stage flags this command offers (a single stage offers only its own)."""
    given = {
        "all_trajectories": getattr(args, "all_trajectories", None),
        "max_failure_rate": getattr(args, "max_failure_rate", None),
        "batch_size": getattr(args, "batch_size", None),
        "general_skills": getattr(args, "general_skills", None),
        "category_skills": getattr(args, "category_skills", None),
        "common_mistakes": getattr(args, "common_mistakes", None),
        "history": getattr(args, "history", None),
        "skills": getattr(args, "skills", None),
        "top_k_skills": getattr(args, "top_k_skills", None),
        "skill_threshold": getattr(args, "skill_threshold", None),
        "max_block_chars": getattr(args, "max_block_chars", None),
        "embedding_model": getattr(args, "embedding_model", None),
        "cutoff_len": getattr(args, "cutoff_len", None),
        "seed": getattr(args, "seed", None),
        "keep_information": (None if not hasattr(args, "actions_only_history")
                             else not args.actions_only_history),
        **card_params(args),
    }
    return {name: value for name, value in given.items() if value is not None}


def build_root_task(args: argparse.Namespace, environ: Mapping[str, str]) -> luigi.Task:
    import skillsft.tasks.shards  # noqa: F401 - registers the shard tasks that stages merge
    from skillsft.tasks import stages

    command = args.command
    if command in ("run", "estimate", "check"):
        work_dir = Path(args.work_dir or environ.get("WORK_DIR") or Path("runs") / args.env)
        rollout_dir = resolve_rollout_dir(args, environ)
        check_rollouts(rollout_dir, args.env)
        if args.skill_bank and not Path(args.skill_bank).is_file():
            raise UsageError(f"--skill-bank {args.skill_bank} is not a file")
        return stages.RunEnv(
            env=args.env,
            work_dir=str(work_dir),
            rollout_dir=str(rollout_dir),
            skill_bank=args.skill_bank or "",
            repo_id=args.repo_id or "",
            private=args.private,
            revision=args.revision or "",
            validation_fraction=args.validation_fraction,
            preferences=args.preferences,
            allow_offline=args.allow_offline,
            **selection_params(args),
            **teacher_params(args, environ),
            **stage_params(args),
            shards=shard_count(args, trajectory_files(rollout_dir)),
        )
    if command == "parse":
        rollout_dir = Path(args.rollout_dir)
        check_rollouts(rollout_dir, args.env)
        output = Path(args.output)
        return stages.ParseRollouts(
            env=args.env,
            work_dir=str(output.parent),
            output_path=str(output),
            rollout_dir=str(rollout_dir),
            **selection_params(args),
            **stage_params(args),
        )
    if command in stages.SINGLE_STAGE_TASKS:
        inputs = [str(Path(p)) for p in args.input]
        if len(inputs) > 1 and command != "aggregate":
            raise UsageError(f"{command} reads one --input file, got {len(inputs)}; only "
                             "aggregate merges several")
        for path in inputs + ([args.skill_bank] if getattr(args, "skill_bank", None) else []):
            if not Path(path).is_file():
                raise UsageError(f"input file {path} does not exist")
        output = Path(args.output)
        extra = teacher_params(args, environ) if command != "flatten" else {}
        if command == "distill":
            extra["skill_bank"] = args.skill_bank
        if command in ("memories", "distill"):
            extra["shards"] = shard_count(args, estimated_trajectories(Path(inputs[0])))
        task_cls = stages.SINGLE_STAGE_TASKS[command]
        return task_cls(
            env=args.env,
            work_dir=str(output.parent),
            output_path=str(output),
            input_paths=tuple(inputs),
            **{k: v for k, v in {**stage_params(args), **extra}.items()
               if k in task_cls.get_param_names(include_significant=True)},
        )
    if command == "publish":
        from skillsft.tasks.publish import publish_command

        card_params(args)  # a missing citation file or tokenizer fails before the export
        raise CommandDone(publish_command(args))
    if command == "report":
        from skillsft.tasks.report import report_command

        report_command(Path(args.work_dir), args.cutoff_len)
        raise CommandDone(0)
    raise UsageError(f"unknown command {command}")


def card_params(args: argparse.Namespace) -> dict[str, object]:
    """The card and token-length flags (publish), checked before any work starts."""
    citation = getattr(args, "citation", None)
    if citation and not Path(citation).is_file():
        raise UsageError(f"--citation {citation} is not a file (expected a BibTeX entry)")
    tokenizer = getattr(args, "tokenizer", None)
    if tokenizer:
        from skillsft.pipeline.token_lengths import load_counter

        load_counter(tokenizer)  # a tokenizer that cannot load fails now, not after the run
    given = {
        "license": getattr(args, "license", None),
        "pretty_name": getattr(args, "pretty_name", None),
        "citation": str(Path(citation).resolve()) if citation else None,
        "tokenizer": tokenizer,
        "cutoff_len": getattr(args, "cutoff_len", None),
    }
    return {name: value for name, value in given.items() if value is not None}


# A processed trajectory takes about this many bytes of JSON (measured: 18.2 MB for 2,100
# ALFWorld trajectories):
# enough to size the default shard count of a single-stage command without reading its input.
BYTES_PER_TRAJECTORY = 8_700


def shard_count(args: argparse.Namespace, trajectories: int) -> int:
    """--shards, or the default for a corpus of this many trajectories."""
    from skillsft.pipeline.shards import auto_shards

    return getattr(args, "shards", None) or auto_shards(trajectories)


def trajectory_files(rollout_dir: Path) -> int:
    """How many rollout files (one trajectory each) a rollout folder holds."""
    return sum(len(files) for _, _, files in os.walk(rollout_dir))


def estimated_trajectories(path: Path) -> int:
    return path.stat().st_size // BYTES_PER_TRAJECTORY
