"""Choosing a teacher by name: a dict from name to constructor, nothing more.

`BATCH_TEACHERS` maps a teacher to its Batch API variant. A stage gets it when asked (--batch)
and also whenever an earlier --batch run left batches it has not collected: answering those
items live would pay for them twice.
"""

from collections.abc import Callable
from pathlib import Path

from skillsft.pipeline.teacher.base import Teacher
from skillsft.pipeline.teacher.batch.ledger import has_open_batches
from skillsft.pipeline.teacher.batch.teacher import BatchOptions, BatchTeacher
from skillsft.pipeline.teacher.offline import make_offline_teacher
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings

TeacherFactory = Callable[[TeacherSettings, Path, str], Teacher]
BatchTeacherFactory = Callable[[TeacherSettings, Path, str, BatchOptions], Teacher]

TEACHERS: dict[str, TeacherFactory] = {
    "openai": OpenAITeacher,
    "offline": make_offline_teacher,
}

BATCH_TEACHERS: dict[str, BatchTeacherFactory] = {
    "openai": BatchTeacher,
}


def make_teacher(
    settings: TeacherSettings, journal_dir: Path, stage: str, batch: BatchOptions | None = None,
    *, open_batches: BatchOptions | None = None,
) -> Teacher:
    """The teacher for one stage; its journal (if it keeps one) lives in journal_dir.

    `batch`: use the Batch API. `open_batches`: how to wait when batches of an earlier run are
    found (the stage then finishes through the Batch API even without `batch`)."""
    batched = BATCH_TEACHERS.get(settings.teacher)
    if batched is not None and (batch is not None or has_open_batches(journal_dir, stage)):
        return batched(settings, Path(journal_dir), stage,
                       batch or open_batches or BatchOptions())
    return TEACHERS[settings.teacher](settings, Path(journal_dir), stage)
