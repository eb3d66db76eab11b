"""The one interface every LLM stage goes through.

A stage builds `TeacherRequest`s (messages, the pydantic model the answer must fit, a prompt
version, and the structured data the request was rendered from) and hands a batch to a
`Teacher`. It gets back one `TeacherResult` per request, in the same order: either a validated
answer or a recorded failure with its reason and raw text. Never a silent None.

A stage over the whole corpus (memories, distillation) asks through `answer_stream` instead:
its requests go in as an iterable, built as the teacher gets to them, and the results come out
in request order, so only a window of requests is ever held. A teacher that can stream
natively has a `stream_batch` method (the OpenAI teacher); any other is fed through
`run_batch` in chunks, here, the one home of that adapter.

The `offline_context` is what lets the offline teacher answer without a network: a recipe
(called with no argument) for the context of the request's kind (kinds.py, contexts.py), from
which that kind's solver (teacher/offline/solvers.py) derives a schema-valid answer. Only the
teachers that read it call it, so a live run never builds it. It is not part of the journal
key: the rendered messages already are.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
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
    """Answers batches of requests for one stage; implementations: openai, offline, batch.
    A teacher may also offer `stream_batch(requests, *, stage) -> AnswerStream`, which
    `answer_stream` then uses instead of feeding `run_batch` in chunks."""

    name: str

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], BatchStats]: ...


# Requests a teacher without `stream_batch` is given per `run_batch` call by `answer_stream`:
# large enough that a chunk's fixed cost is nothing, small enough that a chunk of requests
# (each carrying its rendered prompt) is a few MiB.
STREAM_CHUNK = 256


class AnswerStream:
    """The results of a stream of requests, in request order (iterate it once). `stats` is what
    the batch cost so far: its `model` is known before the first result is yielded, and it is
    complete once the results are exhausted."""

    def __init__(self, stats: BatchStats) -> None:
        self.stats = stats
        self.results: Iterator[TeacherResult[Any]] = iter(())

    def __iter__(self) -> Iterator[TeacherResult[Any]]:
        return self.results

    def close(self) -> None:
        """Stop the stream now: the calls still in flight are abandoned as a kill would abandon
        them (an answer already journaled is kept), and their claims and slots are given back.
        For a consumer that stops early or fails between two results; closing a stream that
        is exhausted does nothing. The results generator refers to its stream (it updates
        `stats`), so without this only the garbage collector would ever stop it."""
        close = getattr(self.results, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "AnswerStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def answer_stream(teacher: Any, requests: Iterable[TeacherRequest[Any]], *,
                  stage: str) -> AnswerStream:
    """Ask `teacher` for every request of the iterable, results in request order, holding a
    bounded number of requests at a time: natively when the teacher has `stream_batch`, else
    through `run_batch` in chunks of STREAM_CHUNK, whose stats add up to the stream's (a teacher
    that needs every request at once, like the Batch API's, collects in its own
    `stream_batch`)."""
    native = getattr(teacher, "stream_batch", None)
    if native is not None:
        return native(requests, stage=stage)  # type: ignore[no-any-return]
    stream = AnswerStream(BatchStats(stage=stage, model=""))  # the first chunk's replace it
    stream.results = _chunked(teacher, iter(requests), stage, stream)
    return stream


def collected_stream(teacher: Any, requests: Iterable[TeacherRequest[Any]], *,
                     stage: str) -> AnswerStream:
    """The stream of a teacher that must see every request at once (the Batch API's, a dry
    run's estimate): one `run_batch` of them all, its results handed out in order."""
    results, stats = teacher.run_batch(list(requests), stage=stage)
    stream = AnswerStream(stats)
    stream.results = iter(results)
    return stream


def _chunked(teacher: Any, requests: Iterator[TeacherRequest[Any]], stage: str,
             stream: AnswerStream) -> Iterator[TeacherResult[Any]]:
    first = True
    while True:
        chunk = list(islice(requests, STREAM_CHUNK))
        if not chunk and not first:
            return
        results, stats = teacher.run_batch(chunk, stage=stage)
        if first:  # the first chunk's stats start the sum (an empty stream keeps them)
            stream.stats, first = stats, False
        else:
            stream.stats.absorb(stats)
        yield from results
        if len(chunk) < STREAM_CHUNK:
            return
