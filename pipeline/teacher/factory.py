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


def batch_options_for(
    settings: TeacherSettings, journal_dir: Path, stage: str, batch: BatchOptions | None = None,
    *, open_batches: BatchOptions | None = None,
) -> BatchOptions | None:
    """Whether (and how) a stage goes through the Batch API: when asked (`batch`), and
    whenever an earlier --batch run left batches it has not collected (then waiting as
    `open_batches` says). The one place that reads the ledger for this."""
    if settings.teacher not in BATCH_TEACHERS:
        return None
    if batch is not None:
        return batch
    if has_open_batches(journal_dir, stage):
        return open_batches or BatchOptions()
    return None


def teacher_for(
    settings: TeacherSettings, journal_dir: Path, stage: str, batch: BatchOptions | None
) -> Teacher:
    """The teacher for one stage once `batch_options_for` has answered."""
    if batch is not None:
        return BATCH_TEACHERS[settings.teacher](settings, Path(journal_dir), stage, batch)
    return TEACHERS[settings.teacher](settings, Path(journal_dir), stage)


def make_teacher(
    settings: TeacherSettings, journal_dir: Path, stage: str, batch: BatchOptions | None = None,
    *, open_batches: BatchOptions | None = None,
) -> Teacher:
    """The teacher for one stage; its journal (if it keeps one) lives in journal_dir.

    `batch`: use the Batch API. `open_batches`: how to wait when batches of an earlier run are
    found (the stage then finishes through the Batch API even without `batch`)."""
    options = batch_options_for(settings, journal_dir, stage, batch, open_batches=open_batches)
    return teacher_for(settings, journal_dir, stage, options)
