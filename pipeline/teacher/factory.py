"""Choosing a teacher by name: a dict from name to constructor, nothing more."""

from collections.abc import Callable
from pathlib import Path

from skillsft.pipeline.teacher.base import Teacher
from skillsft.pipeline.teacher.offline import make_offline_teacher
from skillsft.pipeline.teacher.openai_teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings

TeacherFactory = Callable[[TeacherSettings, Path, str], Teacher]

TEACHERS: dict[str, TeacherFactory] = {
    "openai": OpenAITeacher,
    "offline": make_offline_teacher,
}


def make_teacher(settings: TeacherSettings, journal_dir: Path, stage: str) -> Teacher:
    """The teacher for one stage; its journal (if it keeps one) lives in journal_dir."""
    return TEACHERS[settings.teacher](settings, Path(journal_dir), stage)
