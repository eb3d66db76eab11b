"""Build the teacher a stage task uses, from its Luigi parameters plus the environment.

The API key never travels as a Luigi parameter (parameters are logged and sent to the
scheduler); `TeacherSettings.resolve` reads it here, inside the worker, from
OPENAI_API_KEY / DEEPSEEK_API_KEY. Neither do credentials inside the base URL: the parameter
holds the redacted URL and a hash of the full one, which is found again in the environment.
Three optional layers: the Batch API (--batch), a dry run's estimating teacher
(`estimate_for`: the work dir whose journal counts as free), and the --max-cost budget around
whichever teacher pays.
"""

import os
from pathlib import Path
from typing import Any

from skillsft.pipeline.teacher.base import BatchStats, Teacher
from skillsft.pipeline.teacher.batch.ledger import has_open_batches
from skillsft.pipeline.teacher.batch.teacher import BatchOptions, BatchTeacher
from skillsft.pipeline.teacher.budget import BudgetedTeacher, SpendFile
from skillsft.pipeline.teacher.estimate import EstimatingTeacher
from skillsft.pipeline.teacher.factory import make_teacher
from skillsft.pipeline.teacher.openai.endpoints import full_base_url
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings

CHUNK_WINDOWS = 4  # with --max-cost, a live stage checks the spend every 4 x concurrency calls
# The stages the command was told to --force, handed to the workers (they retry every earlier
# teacher failure of those stages once more).
FORCED_STAGES_VARIABLE = "SKILLSFT_FORCED_STAGES"


def teacher_settings(task: Any, model: str) -> TeacherSettings:
    """The settings of a task's teacher: its parameters plus, from the environment, the key and
    the base URL's credentials."""
    return TeacherSettings.resolve(
        teacher=task.teacher,
        base_url=full_base_url(task.base_url, task.base_url_digest) or None,
        model=model or None,
        concurrency=task.concurrency,
        max_concurrency=task.max_concurrency,
        rpm=task.rpm or None,
        tpm=task.tpm or None,
        price_file=task.prices or None,
        max_output_tokens=task.max_output_tokens,
        response_format=task.response_format,
        timeout=task.timeout,
        request_deadline=task.request_deadline or None,
        retry_failed=task.retry_failed,
        retry_forced=task.stage_name() in os.environ.get(FORCED_STAGES_VARIABLE, "").split(","),
    )


def build_teacher(task: Any, stage: str, model: str) -> Teacher:
    settings = teacher_settings(task, model)
    if task.estimate_for and settings.teacher == "openai":
        return EstimatingTeacher(settings, Path(task.estimate_for) / "journal", stage,
                                 Path(task.work_dir) / "estimate")
    waiting = BatchOptions(wait=task.batch_wait, poll_seconds=task.batch_poll)
    journal_dir = Path(task.work_dir) / "journal"
    batch = waiting if task.stage_name() in task.batch_stages else None
    teacher = reused_teacher(settings, journal_dir, stage, batch) or make_teacher(
        settings, journal_dir=journal_dir, stage=stage, batch=batch, open_batches=waiting)
    if isinstance(teacher, OpenAITeacher):
        _LIVE_TEACHERS[live_key(settings, journal_dir, stage)] = teacher
    if task.max_cost is None or settings.teacher != "openai":
        return teacher
    chunk = 1 << 30 if isinstance(teacher, BatchTeacher) else CHUNK_WINDOWS * settings.concurrency
    spend = SpendFile(Path(task.work_dir) / ".skillsft" / "spend" / f"{task.spend_id}.jsonl")
    return BudgetedTeacher(teacher, budget_usd=task.max_cost, spend=spend, chunk=chunk)


# The live teachers this process made, by settings, journal and stage: the shards of one stage
# that a worker runs one after another reuse one teacher, so its journal index is built once
# and only the lines appended since are read (Luigi runs a task in the worker's own process
# when it has one worker; with several, each task has a process of its own).
_LIVE_TEACHERS: dict[tuple[str, str, str], OpenAITeacher] = {}


def live_key(settings: TeacherSettings, journal_dir: Path, stage: str) -> tuple[str, str, str]:
    return settings.model_dump_json(), str(journal_dir.resolve()), stage


def reused_teacher(settings: TeacherSettings, journal_dir: Path, stage: str,
                   batch: BatchOptions | None) -> Teacher | None:
    """This process's live teacher for the same settings, journal and stage, unless the stage
    goes through the Batch API (asked now, or batches of an earlier run still open)."""
    if batch is not None or has_open_batches(journal_dir, stage):
        return None
    return _LIVE_TEACHERS.get(live_key(settings, journal_dir, stage))


def stats_to_dict(stats: BatchStats) -> dict[str, Any]:
    return stats.model_dump(mode="json")
