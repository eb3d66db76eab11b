"""What the offline teacher answers from, one type per request kind (kinds.py).

They live in the teacher layer, below the stages, so the offline teacher (teacher/offline/)
reads them without importing any stage. A stage builds its kind's context, and only when the
offline teacher is the one answering (`TeacherRequest.offline_context` holds a recipe, called
by that teacher): a live run never pays for it.
"""

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from skillsft.pipeline.envs import EnvSpec
from skillsft.schemas.evolve import Entry


@dataclass(frozen=True)
class MemoryContext:
    """Everything a memory is derived from: the memories stage renders its prompt from it, and
    it is the offline teacher's only input."""

    spec: EnvSpec
    env_id: str
    trajectory_index: int
    goal: str
    category: str
    outcome: str  # "Success" | "Failure"
    data_source: str | None
    steps: tuple[tuple[str | None, str], ...]  # (action, observation); None = initial state
    step_numbers: tuple[int, ...]
    admissible_before: tuple[tuple[str, ...], ...]
    won_index: int | None
    ended_by_limit: bool

    @property
    def memory_id(self) -> str:
        content = orjson.dumps([self.env_id, self.goal, self.steps])
        return f"mem_{self.spec.name}_{hashlib.sha256(content).hexdigest()[:8]}"


@dataclass(frozen=True)
class AggregateContext:
    """One reduction call: the offline teacher merges `items` from this alone."""

    track: str
    level: int
    items: tuple[dict[str, Any], ...]
    max_outputs: int
    placeholder_words: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DistillContext:
    """The thoughts of `steps` (each: index, observation, action, synthetic) are written from
    the goal, the trajectory so far (`history`: observation and action per step), the
    environment's action tables (`semantics`) and the titles of the skills shown."""

    goal: str
    history: tuple[dict[str, str], ...]
    complete: bool  # the history reaches the trajectory's last step
    semantics: Any  # the environment's ActionSemantics, or None
    skill_titles: tuple[str, ...]
    steps: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ReflectContext:
    """What one reflect call shows, for the offline teacher to answer from."""

    environment: str
    bank: tuple[Entry, ...]
    memories: tuple[dict[str, Any], ...]
    rejected: tuple[dict[str, Any], ...]
    sections: tuple[str, ...]
    max_edits: int
    placeholder_words: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MergeContext:
    """What one merge call shows, for the offline teacher to answer from."""

    items: tuple[dict[str, Any], ...]
    max_edits: int
