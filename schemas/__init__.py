"""pydantic models for every record skillsft reads or writes (described in docs/formats.md)."""

from skillsft.schemas.conversation import AlpacaRecord, Conversation, ExtraInfo, Turn
from skillsft.schemas.memory import (
    Memory,
    MemoryContent,
    MemoryTags,
    MistakeToAvoid,
    RefinedStep,
    StrategicGuidelines,
    TaskMeta,
)
from skillsft.schemas.reject import Reject
from skillsft.schemas.report import RunReport, StageReport, TeacherUsage
from skillsft.schemas.skill_bank import CommonMistake, Skill, SkillBank
from skillsft.schemas.trajectory import SearchStep, SearchTrajectorySet, Step, TrajectorySet

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
