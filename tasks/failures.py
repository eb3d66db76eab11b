"""Why a stage task failed, kept on disk for the command that started the run.

Luigi catches a task's exception in whichever process ran it (a worker subprocess with
`--workers N`, another machine behind a shared `luigid`) and only logs a traceback. The command
line wants the one-line cause instead, so `StageTask.on_failure` records it here, beside the
stage's output, and `skillsft` reads it back after the build. The full traceback goes to the
log file, never to the console unless `--verbose`.
"""

import traceback
from dataclasses import dataclass
from pathlib import Path

import orjson

from skillsft.pipeline.errors import ConfigError, RolloutDirError, SkillsftError
from skillsft.pipeline.teacher.batch.pending import BatchesPending
from skillsft.pipeline.workdir import failure_for

# Errors the user fixes in their command line, environment or configuration: exit status 2.
# Every other deliberate error (bad data, too many failures, empty output) is a failed run: 1.
CONFIGURATION_ERRORS: tuple[type[BaseException], ...] = (ConfigError, RolloutDirError)


@dataclass(frozen=True)
class TaskFailure:
    stage: str
    message: str  # one line for a deliberate error; "<Type>: <text>" for a bug
    deliberate: bool  # a SkillsftError: the message says what to do, no traceback needed
    configuration: bool  # the user fixes it in flags, variables or configuration files
    waiting: bool = False  # not a failure: its Batch API batches are still at the provider


def failure_path(output: Path) -> Path:
    return failure_for(output)


def record_failure(output: Path, stage: str, exception: BaseException) -> str:
    """Write the failure beside the stage output; return the traceback for Luigi's log."""
    deliberate = isinstance(exception, SkillsftError)
    first_line = " ".join(str(exception).split()) or type(exception).__name__
    failure = TaskFailure(
        stage=stage,
        message=first_line if deliberate else f"{type(exception).__name__}: {first_line}",
        deliberate=deliberate,
        configuration=isinstance(exception, CONFIGURATION_ERRORS),
        waiting=isinstance(exception, BatchesPending),
    )
    path = failure_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(failure.__dict__))
    return traceback.format_exc()


def read_failure(output: Path) -> TaskFailure | None:
    try:
        return TaskFailure(**orjson.loads(failure_path(output).read_bytes()))
    except (OSError, orjson.JSONDecodeError, TypeError):
        return None


def clear_failure(output: Path) -> None:
    failure_path(output).unlink(missing_ok=True)
