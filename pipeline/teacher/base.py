"""The one interface every LLM stage goes through.

A stage builds `TeacherRequest`s (messages, the pydantic model the answer must fit, a prompt
version, and the structured data the request was rendered from) and hands a batch to a
`Teacher`. It gets back one `TeacherResult` per request, in the same order: either a validated
answer or a recorded failure with its reason and raw text. Never a silent None.

The `offline_context` is what lets the offline teacher answer without a network: a recipe
(called with no argument) for the context of the request's kind (kinds.py, contexts.py), from
which that kind's solver (teacher/offline/solvers.py) derives a schema-valid answer. Only the
teachers that read it call it, so a live run never builds it. It is not part of the journal
key: the rendered messages already are.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from skillsft.schemas.report import TeacherUsage

AnswerT = TypeVar("AnswerT", bound=BaseModel)


@dataclass(frozen=True)
class TeacherRequest(Generic[AnswerT]):
    request_id: str  # the caller's id for the item (e.g. an env id); unique within a batch
    kind: str  # request type, e.g. "memory", "aggregate_skills", "distill"
    messages: tuple[dict[str, str], ...]
    answer_model: type[AnswerT]
    prompt_version: str
    offline_context: Callable[[], Any] | None = None  # builds the offline teacher's context


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
    cached_prompt_tokens: int = 0  # of prompt_tokens, those served from the provider's cache
    retryable: bool = False  # a failure the next run will call again (teacher/failures.py)

    @property
    def ok(self) -> bool:
        return self.answer is not None


class BatchStats(TeacherUsage):
    """What one batch cost (calls, tokens, dollars, failures by reason): the same record the
    stage manifests and the run report keep, so nothing is copied field by field."""

    def absorb(self, part: "BatchStats") -> None:
        """Add another batch of the same stage (aggregation runs one batch per level). Start
        from costs of 0.0 to sum: a cost stays known only while every batch's cost is known."""
        self.model = part.model or self.model
        self.add(part)
        for reason, count in part.failures.items():
            self.failures[reason] = self.failures.get(reason, 0) + count


class Teacher(Protocol):
    """Answers batches of requests for one stage; implementations: openai, offline."""

    name: str

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], BatchStats]: ...
