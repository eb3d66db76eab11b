"""Build the teacher a stage task uses, from its Luigi parameters plus the environment.

The API key never travels as a Luigi parameter (parameters are logged and sent to the
scheduler); `TeacherSettings.resolve` reads it here, inside the worker, from
OPENAI_API_KEY / DEEPSEEK_API_KEY. Neither do credentials inside the base URL: the parameter
holds the redacted URL and a hash of the full one, which is found again in the environment.
"""

import os
from pathlib import Path
from typing import Any

from skillsft.pipeline.teacher.base import BatchStats, Teacher
from skillsft.pipeline.teacher.endpoints import full_base_url
from skillsft.pipeline.teacher.factory import make_teacher
from skillsft.pipeline.teacher.settings import TeacherSettings

# The stages the command was told to --force, handed to the workers (they retry every earlier
# teacher failure of those stages once more).
FORCED_STAGES_VARIABLE = "SKILLSFT_FORCED_STAGES"


def build_teacher(task: Any, stage: str, model: str) -> Teacher:
    settings = TeacherSettings.resolve(
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
    return make_teacher(settings, journal_dir=Path(task.work_dir) / "journal", stage=stage)


def stats_to_dict(stats: BatchStats) -> dict[str, Any]:
    return stats.model_dump(mode="json")
