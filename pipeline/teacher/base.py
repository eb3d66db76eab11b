"""The one interface every LLM stage goes through.

A stage builds `TeacherRequest`s (messages, the pydantic model the answer must fit, a prompt
version, and the structured data the request was rendered from) and hands a batch to a
`Teacher`. It gets back one `TeacherResult` per request, in the same order: either a validated
answer or a recorded failure with its reason and raw text. Never a silent None.

The `offline_context` is what lets the offline teacher answer without a network: each request
`kind` has a solver registered in `OFFLINE_SOLVERS` (by the stage module that owns the kind)
that derives a schema-valid answer from that context. It is not part of the journal key: the
rendered messages already are.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

AnswerT = TypeVar("AnswerT", bound=BaseModel)


@dataclass(frozen=True)
class TeacherRequest(Generic[AnswerT]):
    request_id: str  # the caller's id for the item (e.g. an env id); unique within a batch
    kind: str  # request type, e.g. "memory", "aggregate_skills", "distill"
    messages: tuple[dict[str, str], ...]
    answer_model: type[AnswerT]
    prompt_version: str
    offline_context: Any = None


@dataclass
class TeacherResult(Generic[AnswerT]):
    request_id: str
    answer: AnswerT | None
    error: str | None = None  # why the request failed, when it did
    raw_text: str | None = None
    from_journal: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.answer is not None


@dataclass
class BatchStats:
    """What one batch cost: fed into the run report and the progress bar."""

    stage: str
    model: str
    calls_new: int = 0
    calls_from_journal: int = 0
    calls_failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    failures: dict[str, int] = field(default_factory=dict)
    # Answers taken from the journal were paid by an earlier run; their tokens and price are
    # kept apart so a resumed run still says what its corpus cost in all.
    reused_prompt_tokens: int = 0
    reused_completion_tokens: int = 0
    reused_cost_usd: float | None = None

    def absorb(self, part: "BatchStats") -> None:
        """Add another batch of the same stage (aggregation runs one batch per level).

        A cost stays known only while every batch's cost is known."""
        first = self.calls_new + self.calls_from_journal + self.calls_failed == 0
        self.model = part.model or self.model
        self.calls_new += part.calls_new
        self.calls_from_journal += part.calls_from_journal
        self.calls_failed += part.calls_failed
        self.prompt_tokens += part.prompt_tokens
        self.completion_tokens += part.completion_tokens
        self.reused_prompt_tokens += part.reused_prompt_tokens
        self.reused_completion_tokens += part.reused_completion_tokens
        self.cost_usd = part.cost_usd if first else _sum_known(self.cost_usd, part.cost_usd)
        self.reused_cost_usd = (
            part.reused_cost_usd if first
            else _sum_known(self.reused_cost_usd, part.reused_cost_usd)
        )
        for reason, count in part.failures.items():
            self.failures[reason] = self.failures.get(reason, 0) + count


def _sum_known(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


class Teacher(Protocol):
    """Answers batches of requests for one stage; implementations: openai, offline."""

    name: str

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], BatchStats]: ...


OfflineSolver = Callable[[Any], BaseModel]
OFFLINE_SOLVERS: dict[str, OfflineSolver] = {}


def register_offline_solver(kind: str) -> Callable[[OfflineSolver], OfflineSolver]:
    """Decorator a stage module uses to teach the offline teacher one request kind."""

    def decorate(solver: OfflineSolver) -> OfflineSolver:
        OFFLINE_SOLVERS[kind] = solver
        return solver

    return decorate
