"""pydantic models for every record skillsft reads or writes (see ../shared/docs/FORMATS.md)."""

from schemas.conversation import AlpacaRecord, Conversation, ExtraInfo, Turn
from schemas.memory import (
    Memory,
    MemoryContent,
    MemoryTags,
    MistakeToAvoid,
    RefinedStep,
    StrategicGuidelines,
    TaskMeta,
)
from schemas.reject import Reject
from schemas.report import RunReport, StageReport, TeacherUsage
from schemas.skill_bank import CommonMistake, Skill, SkillBank
from schemas.trajectory import SearchStep, SearchTrajectorySet, Step, TrajectorySet

__all__ = [
    "AlpacaRecord",
    "CommonMistake",
    "Conversation",
    "ExtraInfo",
    "Memory",
    "MemoryContent",
    "MemoryTags",
    "MistakeToAvoid",
    "RefinedStep",
    "Reject",
    "RunReport",
    "SearchStep",
    "SearchTrajectorySet",
    "Skill",
    "SkillBank",
    "StageReport",
    "StrategicGuidelines",
    "TaskMeta",
    "TeacherUsage",
    "Step",
    "TrajectorySet",
    "Turn",
]
