"""The run report (report.json): what each stage took in, produced, rejected and why."""

from pydantic import Field

from schemas.base import StrictModel


class StageReport(StrictModel):
    stage: str
    inputs: int = 0
    outputs: int = 0
    rejected: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    wall_seconds: float | None = None


class TeacherUsage(StrictModel):
    stage: str
    model: str
    calls_new: int = 0
    calls_from_journal: int = 0
    calls_failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None


class RunReport(StrictModel):
    env: str
    stages: list[StageReport] = Field(default_factory=list)
    teacher: list[TeacherUsage] = Field(default_factory=list)
    corpus: dict[str, object] = Field(default_factory=dict)
