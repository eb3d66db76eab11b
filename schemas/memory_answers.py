"""What the teacher must return for stage 2 requests (memories and skill-bank aggregation).

These are the shapes the LLM fills in; they carry no ids. Memory ids, skill ids (`gen_001`,
`cle_001`) and mistake ids (`err_001`) are assigned by us afterwards, deterministically, so a
model can never produce a duplicate or malformed id. Unknown keys are rejected so a model that
drifts from the schema fails validation (and is retried) rather than being half-read.
"""

from typing import Any

from pydantic import Field, field_validator

from skillsft.schemas.base import StrictModel


class RefinedStepAnswer(StrictModel):
    step_index: int
    action: str
    critical_observation: str = ""
    reasoning: str = ""


class MistakeAnswer(StrictModel):
    trigger_condition: str = Field(min_length=1)
    bad_action: str = Field(min_length=1)


class MemoryAnswer(StrictModel):
    """One memory. Successes fill refined_trajectory and planning_pattern; failures fill
    mistakes_to_avoid. Requests ask for the outcome's own subclass below, so an answer missing
    its half fails validation inside the teacher layer and is re-asked, instead of being
    accepted and thrown away afterwards."""

    contextual_description: str = Field(min_length=1)
    refined_trajectory: list[RefinedStepAnswer] | None = None
    planning_pattern: str | None = None
    mistakes_to_avoid: list[MistakeAnswer] = Field(default_factory=list)


class SuccessMemoryAnswer(MemoryAnswer):
    refined_trajectory: list[RefinedStepAnswer] = Field(min_length=1)
    planning_pattern: str = Field(min_length=1)


class FailureMemoryAnswer(MemoryAnswer):
    mistakes_to_avoid: list[MistakeAnswer] = Field(min_length=1)


MEMORY_ANSWER_BY_OUTCOME: dict[str, type[MemoryAnswer]] = {
    "Success": SuccessMemoryAnswer,
    "Failure": FailureMemoryAnswer,
}


def support_hint(value: Any) -> int:
    """A model's `support` as a hint, never a reason to refuse its answer: the pipeline counts
    the items a call merged and bounds every support by that count itself (aggregate.py), and
    a grammar-constrained server may not enforce the schema's `minimum` (llama.cpp does not).
    Anything that is not a count of at least one reads as 1."""
    try:
        return max(1, int(value))
    except (TypeError, ValueError, OverflowError):
        return 1


class SkillDraft(StrictModel):
    title: str = Field(min_length=1)
    principle: str = Field(min_length=1)
    when_to_apply: str = ""
    # How many input items this skill summarises; merged drafts add their supports up. Read by
    # `support_hint` and bounded by the stage's own count (the schema sent is unchanged).
    support: int = Field(default=1, ge=1)

    @field_validator("support", mode="before")
    @classmethod
    def read_support(cls, value: Any) -> int:
        return support_hint(value)


class SkillsAnswer(StrictModel):
    skills: list[SkillDraft]


class MistakeDraft(StrictModel):
    description: str = Field(min_length=1)
    why_it_happens: str = ""
    how_to_avoid: str = Field(min_length=1)
    support: int = Field(default=1, ge=1)

    @field_validator("support", mode="before")
    @classmethod
    def read_support(cls, value: Any) -> int:
        return support_hint(value)


class MistakesAnswer(StrictModel):
    mistakes: list[MistakeDraft]


__all__ = [
    "FailureMemoryAnswer",
    "MEMORY_ANSWER_BY_OUTCOME",
    "MemoryAnswer",
    "SuccessMemoryAnswer",
    "MistakeAnswer",
    "MistakeDraft",
    "MistakesAnswer",
    "RefinedStepAnswer",
    "SkillDraft",
    "SkillsAnswer",
]
