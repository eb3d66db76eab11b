"""Distilled conversations (FORMATS.md 7, ShareGPT layout) and alpaca records (section 8)."""

from typing import Literal

from pydantic import Field

from skillsft.schemas.base import StrictModel


class Turn(StrictModel):
    from_: Literal["human", "gpt"] = Field(alias="from")
    value: str


class ExtraInfo(StrictModel):
    task: str
    task_type: str
    num_steps: int
    source: str
    env_id: str | None = None
    trajectory_id: str | None = None  # env id + episode index: keeps splits by trajectory
    # Ids of the skills and mistakes the experience block shows, in block order (None: written
    # before this field existed).
    skill_ids: list[str] | None = None


class Conversation(StrictModel):
    system: str
    conversations: list[Turn]
    extra_info: ExtraInfo


class AlpacaRecord(StrictModel):
    instruction: str
    output: str
