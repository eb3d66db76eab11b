"""The teacher that answers a stage through the provider's Batch API, at the batch price.

It keeps the live teacher's promises with the same journal: a request whose answer is on disk
is never sent again, and every answer is validated (and re-asked when invalid) the same way, so
a batch run and a live run of the same requests make the same corpus. Each item's body is made
by the function that makes a live call's body (chat_request.py), in the response mode
negotiated for the endpoint (forced by --response-format, known from `response_modes.json`, or
probed once with a tiny live request, as the live teacher does). What changes is the unit of
work. A round:

1. under the stage's ledger lock, confirm submissions a crash left unconfirmed (ledger.py);
2. poll every open batch once; a finished one has its answers written to the journal and its
   failed items listed in the ledger;
3. follow every conversation through the journal (conversation.py); what still needs a call
   and is in no open batch goes into one new batch: first asks, re-asks after validation
   failures, and items whose batch failed or expired, while they have failed fewer than
   `max_retries` + 1 times (the live teacher's limit);
4. when nothing is left in flight, the answers are returned; otherwise, with `wait`, sleep and
   go round again, and without it raise `BatchesPending`, which the command reports as a
   stage that is waiting (exit 0) and says when to come back.

A live request is never made for an item sitting in a batch: the factory hands a stage with
open batches to this teacher even when --batch was not given (it then collects and finishes in
batch mode).
"""

import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import openai
from tqdm.auto import tqdm

from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.teacher.base import (
    AnswerStream,
    BatchStats,
    TeacherRequest,
    TeacherResult,
    collected_stream,
)
from skillsft.pipeline.teacher.batch.conversation import Followed, Step, follow
from skillsft.pipeline.teacher.batch.ledger import BatchLedger, LedgerEvent, ledger_path
from skillsft.pipeline.teacher.batch.pending import BatchesPending
from skillsft.pipeline.teacher.batch.provider import (
    FINAL_STATES,
    BatchProvider,
    ItemOutcome,
    item_line,
)
from skillsft.pipeline.teacher.journal import Journal, JournalRecord
from skillsft.pipeline.teacher.openai.chat_request import body_bytes, chat_body, chat_key
from skillsft.pipeline.teacher.openai.endpoints import redact_url, scrub
from skillsft.pipeline.teacher.openai.structured import Messages, ResponseMode
from skillsft.pipeline.teacher.openai.teacher import (
    OpenAITeacher,
    failed_result,
    generation_parameters,
)
from skillsft.pipeline.teacher.pricing import PriceTable
from skillsft.pipeline.teacher.progress import BatchTracker
from skillsft.pipeline.teacher.settings import TeacherSettings, require_api_key
from skillsft.pipeline.teacher.usage import read_usage, warn_missing_usage

log = logging.getLogger("skillsft.teacher")


@dataclass(frozen=True)
class BatchOptions:
    wait: bool = False  # poll until every batch is done (--batch-wait)
    poll_seconds: float = 30.0  # between polls while waiting
    max_items: int = 50_000  # per batch: the OpenAI limits
    max_bytes: int = 190 * 1024 * 1024  # of the input file (OpenAI accepts up to 200 MB)


class BatchApiError(SkillsftError):
    """A Batch API call failed after the client's own retries."""


class BatchTeacher:
    name = "openai"  # same answers as the live teacher: the corpus records the same source

    def __init__(
        self, settings: TeacherSettings, journal_dir: Path, stage: str,
        options: BatchOptions | None = None, *, prices: PriceTable | None = None,
    ) -> None:
        require_api_key(settings)
        self.settings = settings
        self.options = options or BatchOptions()
        self.stage = stage
        self.model = settings.model_for(stage)
        self.parameters = generation_parameters(self.model, settings)
        self.journal_dir = Path(journal_dir)
        self.journal = Journal(self.journal_dir / f"teacher_{stage}.jsonl")
        self.ledger = BatchLedger(ledger_path(journal_dir, stage))
        table = prices or PriceTable.with_overrides(settings.price_file, settings.price_overrides)
        self.prices = table.for_batch()
        self.provider = BatchProvider(settings)
        self.batches_submitted = 0  # by this object, for tests and the measurement
        self.mode: ResponseMode | None = None  # settled before the first submission

    def key_for(self, messages: Messages, request: TeacherRequest[Any]) -> str:
        return chat_key(self.model, self.parameters, messages, request)

    def response_mode(self) -> ResponseMode:
        """The mode the endpoint was negotiated in, the live teacher's way (negotiate: forced,
        known, or probed once); asked only when something is to be submitted."""
        if self.mode is None:
            self.mode = OpenAITeacher(self.settings, self.journal_dir, self.stage).negotiate()
        return self.mode

    # The stage's entry point --------------------------------------------------------------

    def stream_batch(
        self, requests: Iterable[TeacherRequest[Any]], *, stage: str
    ) -> AnswerStream:
        """A stage's stream of requests (base.answer_stream), collected: a batch is submitted
        with all its items at once, so this teacher holds every request of the stage (and
        every result) as `run_batch` does; only the live teacher streams."""
        return collected_stream(self, requests, stage=stage)

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], BatchStats]:
        tracker = BatchTracker(stage, self.model, len(requests), prices=self.prices,
                               show_progress=False)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(self.key_for(request.messages, request), []).append(index)
        firsts = {key: requests[indexes[0]] for key, indexes in groups.items()}
        collected_here: set[str] = set()
        try:
            while True:
                with self.ledger.lock(), self._api_errors():
                    self._recover()
                    collected_here |= self._collect(tracker)
                    self.journal.refresh()
                    followed = {key: self._follow(r) for key, r in firsts.items()}
                    waiting = self._submit(firsts, followed)
                self._show(followed, waiting)
                if not waiting:
                    break
                if not self.options.wait:
                    batch_ids = sorted({s.batch_id or s.submission
                                        for s in self.ledger.open_submissions()})
                    raise BatchesPending(stage, batch_ids, len(waiting))
                time.sleep(self.options.poll_seconds)
            results: list[TeacherResult[Any] | None] = [None] * len(requests)
            given_up = [f.step.key for f in followed.values()
                        if f.result is None and f.step is not None]
            final = {key: followed[key].result or self._gave_up(firsts[key], followed[key].step)
                     for key in groups}
            if given_up:
                self.ledger.append(LedgerEvent(event="gave_up", time=time.time(),
                                               submission="-", keys=given_up))
            for key, indexes in groups.items():
                outcome = followed[key]
                result = final[key]
                if any(used in collected_here for used in outcome.keys_used):
                    result = replace(result, from_journal=False)  # paid for in this run
                for index in indexes:
                    results[index] = replace(result, request_id=requests[index].request_id)
                    tracker.finished(results[index])  # type: ignore[arg-type]
        finally:
            stats = tracker.close()
        return [r for r in results if r is not None], stats

    @contextlib.contextmanager
    def _api_errors(self) -> Iterator[None]:
        """A failed Batch API call ends the stage with one line (never the key); what was
        submitted or collected before it is in the ledger and the journal."""
        url = self.settings.first_endpoint()
        shown = redact_url(url)
        try:
            yield
        except openai.NotFoundError as exc:
            raise BatchApiError(
                f"{shown} does not offer the Batch API ({scrub(str(exc.request.url), url)} "
                "answered 404); run without --batch"
            ) from None
        except openai.APIError as exc:
            secret = self.settings.api_key.get_secret_value() if self.settings.api_key else ""
            detail = scrub(str(exc), url)
            detail = detail.replace(secret, "[api key]") if secret else detail
            raise BatchApiError(
                f"a Batch API call to {shown} failed ({type(exc).__name__}: "
                f"{detail[:300]}); re-run the same command: submitted batches are kept"
            ) from None

    def _follow(self, request: TeacherRequest[Any]) -> Followed:
        return follow(self.journal, request, self.key_for, self.settings.reask_limit,
                      when_exhausted="fail")

    def _gave_up(self, request: TeacherRequest[Any], step: Step | None) -> TeacherResult[Any]:
        """A request whose next call failed in batches more often than the limit allows."""
        reasons = self.ledger.failures.get(step.key, []) if step else []
        last = reasons[-1] if reasons else "batch_failed: no answer"
        return failed_result(request, f"{last} (in {len(reasons)} batches)", None, 0, 0,
                             step.attempt if step else 0)

    # One round ----------------------------------------------------------------------------

    def _recover(self) -> None:
        """Confirm or abandon submissions whose batch id never reached the ledger."""
        for submission in self.ledger.open_submissions():
            if submission.batch_id is not None:
                continue
            batch = self.provider.find(submission.submission, submission.file_id)
            if batch is not None:
                self._say(f"teacher {self.stage} [batch]: found batch {batch.id}, submitted "
                          "by a run that stopped before recording it; collecting it instead "
                          "of submitting again")
                self.ledger.append(LedgerEvent(event="submitted", time=time.time(),
                                               submission=submission.submission,
                                               batch_id=batch.id))
            else:
                self.ledger.append(LedgerEvent(event="abandoned", time=time.time(),
                                               submission=submission.submission))

    def _collect(self, tracker: BatchTracker) -> set[str]:
        """Poll each open batch once; journal the answers of the finished ones."""
        collected: set[str] = set()
        for submission in self.ledger.open_submissions():
            assert submission.batch_id is not None  # _recover ran first, under the same lock
            batch = self.provider.retrieve(submission.batch_id)
            submission.status = batch.status
            if batch.status not in FINAL_STATES:
                continue
            failed: dict[str, str] = {}
            for outcome in self.provider.outcomes(batch, submission.keys):
                if outcome.completion is None:
                    failed[outcome.key] = outcome.error or "batch_failed: no answer"
                    self._journal_error(outcome)
                    continue
                record = self._journal_answer(outcome, submission.mode)
                tracker.paid(record.model or self.model, record.prompt_tokens,
                             record.completion_tokens, record.cached_prompt_tokens)
                collected.add(outcome.key)
            self.ledger.append(LedgerEvent(event="collected", time=time.time(),
                                           submission=submission.submission,
                                           batch_id=batch.id, status=batch.status,
                                           failed=failed))
        return collected

    def _journal_answer(self, outcome: ItemOutcome, mode: str | None) -> JournalRecord:
        completion = outcome.completion or {}
        choice = (completion.get("choices") or [{}])[0]
        raw_text = (choice.get("message") or {}).get("content")
        usage = read_usage(completion.get("usage"), "", raw_text)
        if usage.estimated:
            warn_missing_usage(redact_url(self.settings.first_endpoint()), self.model)
        record = JournalRecord(
            key=outcome.key, kind="response", stage=self.stage,
            model=completion.get("model") or self.model,
            raw_text=raw_text,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            cached_prompt_tokens=usage.cached_prompt_tokens, usage_estimated=usage.estimated,
            time=time.time(), response_mode=mode,
        )
        self.journal.append(record)
        return record

    def _journal_error(self, outcome: ItemOutcome) -> None:
        self.journal.append(JournalRecord(key=outcome.key, kind="error", stage=self.stage,
                                          time=time.time(), error=outcome.error))

    def _submit(
        self, firsts: dict[str, TeacherRequest[Any]], followed: dict[str, Followed]
    ) -> list[str]:
        """Send what needs a call in new batches; return the keys still in flight."""
        in_flight = self.ledger.keys_in_open_batches()
        waiting: list[str] = []
        to_send: dict[str, tuple[TeacherRequest[Any], Step]] = {}
        for key, outcome in followed.items():
            step = outcome.step
            if step is None:
                continue
            if step.key in in_flight:
                waiting.append(key)
            elif len(self.ledger.failures.get(step.key, [])) <= self.settings.max_retries:
                to_send.setdefault(step.key, (firsts[key], step))
                waiting.append(key)
        lines: list[tuple[str, bytes]] = []
        if to_send:
            mode = self.response_mode()
            lines = [(key, item_line(key, body_bytes(chat_body(
                self.model, step.messages, self.parameters, mode, request.answer_model))))
                for key, (request, step) in to_send.items()]
        chunk: list[tuple[str, bytes]] = []
        size = 0
        for key, line in lines:
            line_bytes = len(line) + 1
            if chunk and (len(chunk) >= self.options.max_items
                          or size + line_bytes > self.options.max_bytes):
                self._submit_one(chunk)
                chunk, size = [], 0
            chunk.append((key, line))
            size += line_bytes
        if chunk:
            self._submit_one(chunk)
        return waiting

    def _submit_one(self, items: list[tuple[str, bytes]]) -> None:
        lines = [line for _, line in items]
        file_id = self.provider.upload(lines)
        submission = uuid.uuid4().hex
        keys = [key for key, _ in items]
        self.ledger.append(LedgerEvent(event="intent", time=time.time(), submission=submission,
                                       file_id=file_id, keys=keys, mode=self.mode))
        batch = self.provider.create(file_id, submission)
        # Nothing may happen between the create call and this line: it is what makes a re-run
        # poll this batch instead of paying for it again.
        self.ledger.append(LedgerEvent(event="submitted", time=time.time(),
                                       submission=submission, batch_id=batch.id))
        self.batches_submitted += 1

    # Progress -----------------------------------------------------------------------------

    def _show(self, followed: dict[str, Followed], waiting: list[str]) -> None:
        states: dict[str, int] = {}
        for submission in self.ledger.submissions.values():
            state = ("collected" if submission.collected else "abandoned"
                     if submission.abandoned else submission.status or "submitted")
            states[state] = states.get(state, 0) + 1
        in_batches = set(waiting)
        answered = sum(1 for f in followed.values() if f.result is not None and f.result.ok)
        failed = len(followed) - answered - len(in_batches)
        line = (f"teacher {self.stage} [batch]: batches "
                + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
                + f"; requests: {answered} answered, {len(waiting)} in batches, {failed} failed")
        self._say(line)

    def _say(self, line: str) -> None:
        log.info(line)
        if self.settings.show_progress:
            tqdm.write(line)
