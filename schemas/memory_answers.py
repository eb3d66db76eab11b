"""What the teacher must return for stage 2 requests (memories and skill-bank aggregation).

These are the shapes the LLM fills in; they carry no ids. Memory ids, skill ids (`gen_001`,
`cle_001`) and mistake ids (`err_001`) are assigned by us afterwards, deterministically, so a
model can never produce a duplicate or malformed id. Unknown keys are rejected so a model that
drifts from the schema fails validation (and is retried) rather than being half-read.
"""

from pydantic import Field

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


class SkillDraft(StrictModel):
    title: str = Field(min_length=1)
    principle: str = Field(min_length=1)
    when_to_apply: str = ""
    # How many input items this skill summarises; merged drafts add their supports up.
    support: int = Field(default=1, ge=1)


class SkillsAnswer(StrictModel):
    skills: list[SkillDraft]


class MistakeDraft(StrictModel):
    description: str = Field(min_length=1)
    why_it_happens: str = ""
    how_to_avoid: str = Field(min_length=1)
    support: int = Field(default=1, ge=1)


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
