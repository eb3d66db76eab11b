"""A small, schema-constrained request set for teacher tests and benchmarks: prompts that differ
only by an item number, answered by a model with nesting and constraints."""

from pydantic import BaseModel, Field

from skillsft.pipeline.teacher.base import TeacherRequest


class ToyAnswer(BaseModel):
    """A small answer model with nesting and constraints, for teacher tests."""

    summary: str = Field(min_length=1)
    steps: list[str] = Field(min_length=1)
    score: int


def toy_requests(count: int, prompt_version: str = "v1") -> list[TeacherRequest[ToyAnswer]]:
    """`count` distinct requests (item0000, item0001, ...) of kind "toy"."""
    return [
        TeacherRequest(
            request_id=f"item{index:04d}",
            kind="toy",
            messages=(
                {"role": "system", "content": "Summarise the item as JSON."},
                {"role": "user", "content": f"Item number {index}."},
            ),
            answer_model=ToyAnswer,
            prompt_version=prompt_version,
        )
        for index in range(count)
    ]
