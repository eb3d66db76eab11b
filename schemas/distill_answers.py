"""What the teacher returns for a distillation request: one short thought per step.

The base model checks each thought on its own (non-empty, no tags that would break the
`<think>…</think>` wrapper). Whether the answer covers exactly the steps that were asked for
depends on the request, so `thoughts_answer_model(indices)` derives a model that also knows the
expected step indices: any teacher that validates against `answer_model` then rejects an answer
with a missing, extra or repeated step, and its error names them so a re-ask can quote it.
"""

from collections import Counter
from functools import lru_cache
from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from skillsft.schemas.base import StrictModel

_FORBIDDEN_TAGS = ("<think>", "</think>", "<action>", "</action>")


class StepThought(StrictModel):
    step_index: int
    thought: str = Field(min_length=1)

    @field_validator("thought")
    @classmethod
    def _clean_thought(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("thought is empty; write one or two sentences for this step")
        for tag in _FORBIDDEN_TAGS:
            if tag in value:
                raise ValueError(f"thought must not contain the tag {tag}; write plain text")
        return value


class DistillAnswer(StrictModel):
    thoughts: list[StepThought]

    # Set on the per-request subclasses made by `thoughts_answer_model`; None: not checked.
    expected_indices: ClassVar[tuple[int, ...] | None] = None

    @model_validator(mode="after")
    def _one_thought_per_expected_step(self) -> "DistillAnswer":
        if self.expected_indices is not None:
            check_step_indices([t.step_index for t in self.thoughts], self.expected_indices)
        return self

    def by_index(self) -> dict[int, str]:
        return {t.step_index: t.thought for t in self.thoughts}


def check_step_indices(got: list[int], expected: tuple[int, ...]) -> None:
    """Raise a ValueError naming the missing, extra and repeated step indices, if any."""
    counts = Counter(got)
    repeated = sorted(i for i, n in counts.items() if n > 1)
    missing = sorted(set(expected) - counts.keys())
    extra = sorted(counts.keys() - set(expected))
    if not (missing or extra or repeated):
        return
    problems = []
    if missing:
        problems.append(f"missing step_index {missing}")
    if extra:
        problems.append(f"unexpected step_index {extra}")
    if repeated:
        problems.append(f"repeated step_index {repeated}")
    raise ValueError(
        f"expected exactly one thought for each step_index {list(expected)}: " + "; ".join(problems)
    )


@lru_cache(maxsize=1024)
def thoughts_answer_model(expected: tuple[int, ...]) -> type[DistillAnswer]:
    """A `DistillAnswer` whose validation requires exactly the given step indices.

    The subclass keeps the name and JSON schema of `DistillAnswer`, so what the teacher is asked
    for (and any journal key built from the schema) does not depend on the indices.
    """
    return type(
        "DistillAnswer",
        (DistillAnswer,),
        {"expected_indices": tuple(expected), "__module__": __name__},
    )
