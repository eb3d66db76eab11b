"""What the teacher returns for a distillation request: one short thought per step.

The base model checks each thought on its own (non-empty, no tags that would break the
`<think>…</think>` wrapper). Whether the answer covers exactly the steps that were asked for
depends on the request, so `thoughts_answer_model(indices)` derives a model that also knows the
expected step indices: any teacher that validates against `answer_model` then rejects an answer
with a missing, extra or repeated step, and its error names them so a re-ask can quote it.

The schema sent to the teacher (`teacher_schema`) says the same thing in a form a
grammar-constrained server enforces while decoding: `thoughts` is an object with one required
property per asked step (`"step_3": "..."`), no other property allowed, so a missing, extra or
repeated step cannot be written at all. That form stays within OpenAI's strict mode (fixed-length
tuples are not). Both forms validate: the object form is turned into the list form on the way in.
"""

import re
from collections import Counter
from functools import lru_cache
from typing import Any, ClassVar

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


_STEP_KEY = re.compile(r"^step_(-?\d+)$")


def step_key(index: int) -> str:
    """The property name of one step in the object form of `thoughts`."""
    return f"step_{index}"


class DistillAnswer(StrictModel):
    thoughts: list[StepThought]

    # Set on the per-request subclasses made by `thoughts_answer_model`; None: not checked.
    expected_indices: ClassVar[tuple[int, ...] | None] = None

    @classmethod
    def teacher_schema(cls) -> dict[str, Any]:
        """The schema the teacher is asked to fill: one required property per expected step."""
        if cls.expected_indices is None:
            return cls.model_json_schema()
        thought = {"type": "string", "minLength": 1}
        return {
            "type": "object",
            "properties": {
                "thoughts": {
                    "type": "object",
                    "properties": {step_key(i): thought for i in cls.expected_indices},
                    "required": [step_key(i) for i in cls.expected_indices],
                    "additionalProperties": False,
                }
            },
            "required": ["thoughts"],
            "additionalProperties": False,
        }

    @model_validator(mode="before")
    @classmethod
    def _thoughts_by_step_key(cls, data: Any) -> Any:
        """Accept `{"thoughts": {"step_3": "..."}}` (the form `teacher_schema` asks for)."""
        if not isinstance(data, dict) or not isinstance(data.get("thoughts"), dict):
            return data
        thoughts = []
        for key, text in data["thoughts"].items():
            match = _STEP_KEY.match(str(key))
            if match is None:
                raise ValueError(f"thoughts has a property {key!r}; expected step_<index> keys")
            thoughts.append({"step_index": int(match.group(1)), "thought": text})
        return {**data, "thoughts": thoughts}

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

    The subclass keeps the name of `DistillAnswer`; its `teacher_schema` (and so the journal
    key, which covers the schema sent) names the indices.
    """
    return type(
        "DistillAnswer",
        (DistillAnswer,),
        {"expected_indices": tuple(expected), "__module__": __name__},
    )
