"""Skill memories (FORMATS.md section 4).

The released SkillRL memory files nest two fields one level deeper than the format
(`refined_trajectory.refined_trajectory`, `strategic_guidelines.strategic_guidelines`);
the before-validators below unwrap them so both shapes load into one model.
"""

from typing import Any, Literal

from pydantic import Field, field_validator

from skillsft.schemas.base import OpenModel


def _unwrap(value: Any, key: str) -> Any:
    """Return value[key] when value is the one-key wrapper the released files use."""
    if isinstance(value, dict) and key in value and len(value) == 1:
        return value[key]
    return value


class RefinedStep(OpenModel):
    step_index: int | str
    action: str
    critical_observation: str = ""
    reasoning: str = ""


class MistakeToAvoid(OpenModel):
    trigger_condition: str
    bad_action: str


class StrategicGuidelines(OpenModel):
    planning_pattern: str | None = None
    mistakes_to_avoid: list[MistakeToAvoid] = Field(default_factory=list)


class TaskMeta(OpenModel):
    original_goal: str
    data_source: str | None = Field(default=None, exclude_if=lambda value: value is None)


class MemoryTags(OpenModel):
    environment: str
    outcome: Literal["Success", "Failure"]
    # Only Search memories have a QA source; the others leave the key out, as released files do.
    data_source: str | None = Field(default=None, exclude_if=lambda value: value is None)


class MemoryContent(OpenModel):
    task_meta: TaskMeta
    refined_trajectory: list[RefinedStep] | None = None
    strategic_guidelines: StrategicGuidelines = Field(default_factory=StrategicGuidelines)

    @field_validator("refined_trajectory", mode="before")
    @classmethod
    def _unwrap_refined(cls, value: Any) -> Any:
        return _unwrap(value, "refined_trajectory")

    @field_validator("strategic_guidelines", mode="before")
    @classmethod
    def _unwrap_guidelines(cls, value: Any) -> Any:
        value = _unwrap(value, "strategic_guidelines")
        return {} if value is None else value


class Memory(OpenModel):
    memory_id: str
    contextual_description: str
    tags: MemoryTags
    content: MemoryContent
    origin_env_id: str




__all__ = [
    "Memory",
    "MemoryContent",
    "MemoryTags",
    "MistakeToAvoid",
    "RefinedStep",
    "StrategicGuidelines",
    "TaskMeta",
]
