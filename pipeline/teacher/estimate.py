"""What a stage's teacher requests would cost, before anything is paid.

`price_requests` looks at the rendered requests a stage hands its teacher: a request whose
answer the journal already holds is free (a re-run reuses it); every other one is counted.

- Input tokens: the characters of the messages as sent (their JSON, as the chat endpoint
  receives them) divided by 4. The prompts are the exact ones the stage renders; only the
  count is approximate, because the model's own tokenizer is not used (none ships with
  skillsft). On English prose and JSON, 4 characters per token is the usual rule of thumb.
- Output tokens: the size of a stand-in answer (the offline teacher's answer to the same
  request, characters / 4), since no answer exists yet. Reasoning models also bill hidden
  reasoning tokens, which no estimate can see; re-asks after invalid answers are not counted.
- Dollars: the price table (pricing.py: --prices, else genai-prices' data), live and at the
  Batch API's rates;
  a model without a price is named, never costed at zero.

`EstimatingTeacher` answers a whole dry run without paying: journal hits with their journaled
answer, everything else with the offline stand-in, so later stages render the requests they
would send (their counts are exact where they do not depend on the answers' content; the
aggregation and distillation prompts quote earlier answers, so their tokens are estimates).
"""

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from skillsft.pipeline.formats.token_lengths import CHARS_PER_TOKEN
from skillsft.pipeline.teacher.base import (
    AnswerStream,
    BatchStats,
    TeacherRequest,
    TeacherResult,
    collected_stream,
)
from skillsft.pipeline.teacher.batch.conversation import follow
from skillsft.pipeline.teacher.journal import Journal
from skillsft.pipeline.teacher.offline import solve
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.pricing import PriceTable
from skillsft.pipeline.teacher.settings import TeacherSettings

TOKEN_COUNT_METHOD = (
    "input tokens = characters of each rendered request's messages (as JSON) / 4, not the "
    "model's tokenizer; output tokens = size of a stand-in answer / 4 (re-asks and hidden "
    "reasoning tokens not included); requests already in the journal are free"
)


def message_tokens(messages: Sequence[dict[str, str]]) -> int:
    return len(orjson.dumps(list(messages)).decode()) // CHARS_PER_TOKEN


def answer_tokens(answer: BaseModel | None) -> int:
    return len(answer.model_dump_json()) // CHARS_PER_TOKEN if answer is not None else 0


class StageEstimate(BaseModel):
    """One teacher stage's requests and their price (summed over its batches)."""

    stage: str
    model: str
    requests: int = 0  # every request the stage hands its teacher, duplicates once
    in_journal: int = 0  # answered already: free
    to_send: int = 0
    input_tokens: int = 0  # of the requests to send
    output_tokens: int = 0  # estimated, of the requests to send
    usd_live: float | None = 0.0  # None: the model has no price
    usd_batch: float | None = 0.0

    def add(self, other: "StageEstimate") -> None:
        for name in ("requests", "in_journal", "to_send", "input_tokens", "output_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("usd_live", "usd_batch"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, None if mine is None or theirs is None else mine + theirs)


class Priced(BaseModel):
    estimate: StageEstimate
    results: list[Any]  # the journal's result per request, None where a call is needed


def price_requests(
    requests: Sequence[TeacherRequest[Any]], *, stage: str, model: str, journal: Journal,
    key_for: Any, reask_limit: int, prices: PriceTable,
) -> Priced:
    """Count and price the requests a teacher would send now."""
    estimate = StageEstimate(stage=stage, model=model)
    journal.refresh()
    seen: dict[str, TeacherResult[Any] | None] = {}
    results: list[TeacherResult[Any] | None] = []
    for request in requests:
        key = key_for(request.messages, request)
        if key not in seen:
            # priced as live: a conversation that ran out of re-asks is asked again (a batch
            # round would fail it instead, so for --batch this is an upper bound)
            outcome = follow(journal, request, key_for, reask_limit, when_exhausted="ask_again",
                             first_key=key)
            hit = outcome.result if outcome.result is not None and outcome.result.ok else None
            seen[key] = hit
            estimate.requests += 1
            if hit is not None:
                estimate.in_journal += 1
            else:
                estimate.to_send += 1
                estimate.input_tokens += message_tokens(request.messages)
                estimate.output_tokens += answer_tokens(solve(request).answer)
        found = seen[key]
        results.append(None if found is None else replace(found, request_id=request.request_id))
    live = prices.cost(model, estimate.input_tokens, estimate.output_tokens)
    estimate.usd_live = live
    estimate.usd_batch = prices.for_batch().cost(model, estimate.input_tokens,
                                                 estimate.output_tokens)
    return Priced(estimate=estimate, results=results)


class EstimatingTeacher:
    """A dry run's teacher: prices what would be sent, answers with journal or stand-in."""

    name = "openai"  # the stages render exactly what they would for the real teacher

    def __init__(self, settings: TeacherSettings, journal_dir: Path, stage: str,
                 out_dir: Path) -> None:
        self.live = OpenAITeacher(settings, journal_dir, stage)  # for its keys and prices
        self.settings = settings
        self.stage = stage
        self.out_dir = Path(out_dir)

    def stream_batch(
        self, requests: Iterable[TeacherRequest[Any]], *, stage: str
    ) -> AnswerStream:
        """Collected (base.collected_stream): a stage's estimate is priced over all of its
        requests at once, duplicates counted once, as its batch would be."""
        return collected_stream(self, requests, stage=stage)

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], BatchStats]:
        out_path = self.out_dir / f"{stage}.json"  # named like the stage's manifest entry
        priced = price_requests(
            requests, stage=stage, model=self.live.model, journal=self.live.journal,
            key_for=self.live.key_for, reask_limit=self.settings.reask_limit,
            prices=self.live.prices,
        )
        total = priced.estimate
        if out_path.exists():  # aggregation prices one batch per level
            total = StageEstimate.model_validate_json(out_path.read_bytes())
            total.add(priced.estimate)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        out_path.write_text(total.model_dump_json())
        results = [found or solve(request)
                   for found, request in zip(priced.results, requests, strict=True)]
        return results, BatchStats(stage=stage, model=self.live.model)


def read_estimates(out_dir: Path) -> list[StageEstimate]:
    return [StageEstimate.model_validate_json(path.read_bytes())
            for path in sorted(Path(out_dir).glob("*.json"))]
