"""Build the teacher a stage task uses, from its Luigi parameters plus the environment.

The API key never travels as a Luigi parameter (parameters are logged and sent to the
scheduler); `TeacherSettings.resolve` reads it here, inside the worker, from
OPENAI_API_KEY / DEEPSEEK_API_KEY.
"""

from pathlib import Path
from typing import Any

from skillsft.pipeline.teacher.base import BatchStats, Teacher
from skillsft.pipeline.teacher.batch.teacher import BatchOptions
from skillsft.pipeline.teacher.factory import make_teacher
from skillsft.pipeline.teacher.settings import TeacherSettings


def build_teacher(task: Any, stage: str, model: str) -> Teacher:
    settings = TeacherSettings.resolve(
        teacher=task.teacher,
        base_url=task.base_url or None,
        model=model or None,
        concurrency=task.concurrency,
        rpm=task.rpm or None,
        tpm=task.tpm or None,
        price_file=task.prices or None,
    )
    batch = (BatchOptions(wait=task.batch_wait, poll_seconds=task.batch_poll)
             if task.stage_name() in task.batch_stages else None)
    return make_teacher(settings, journal_dir=Path(task.work_dir) / "journal", stage=stage,
                        batch=batch)


def stats_to_dict(stats: BatchStats) -> dict[str, Any]:
    return stats.model_dump(mode="json")
