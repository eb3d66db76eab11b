"""The teacher that calls an OpenAI-compatible chat-completions endpoint.

Every retry is ours: the openai client is built with `max_retries=0` (runtime.py), and `_create`
retries a call that met a timeout, a dropped connection, a 408/409 or a 5xx up to
`max_retries` times (jittered exponential backoff, or the server's Retry-After), and a 429 up to
`RATE_LIMIT_ROUNDS` times more (Retry-After as the least wait: rate limits are the one error
that waiting reliably cures), all within the request deadline. The concurrency slot is given
back before each wait, so a halved limit really holds back the pool.

Around the calls:
- the process's teacher runtime (runtime.py), shared by every batch, shard, stage and the
  pre-flight of this process: the clients, the endpoint pool, the adaptive concurrency limit
  (limits.AdaptiveLimiter; an httpx response hook sees every 429, halves the limit and pauses
  new starts for the Retry-After; each success climbs it back by about one per window), the
  machine-wide in-flight slots and --rpm/--tpm windows (slots.py, pace.py), the response mode;
- the journal (journal.py): a response is fsynced before use, re-runs answer from it, and a
  per-request claim stops two processes paying for the same request;
- structured answers (structured.py, negotiation.py): the response mode an (endpoint, model)
  accepts is probed once before its first paid request and kept beside the journal; a refusal
  met later (any 4xx/5xx about the response format) steps down one mode and is kept too; every
  answer validated, with a bounded re-ask that tells the model what was wrong.
A request that still fails is a TeacherResult with its error and last raw text.
"""

import asyncio
import logging
import random
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx2
import openai
import orjson

from skillsft.pipeline.formats.token_lengths import CHARS_PER_TOKEN
from skillsft.pipeline.teacher.base import AnswerStream, BatchStats, TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.batch.conversation import Step, follow
from skillsft.pipeline.teacher.failures import retryable_after, skip_reason
from skillsft.pipeline.teacher.journal import Journal, JournalRecord, request_key
from skillsft.pipeline.teacher.openai.chat_request import body_bytes, chat_body, chat_key
from skillsft.pipeline.teacher.openai.endpoints import redact_url, scrub, url_digest
from skillsft.pipeline.teacher.openai.negotiation import (
    PROBE_MAX_TOKENS,
    PROBE_PROMPT,
    ModeStore,
    ProbeAnswer,
    is_format_refusal,
    mode_is_confirmed,
)
from skillsft.pipeline.teacher.openai.preflight import (
    CONNECT_DEADLINE_S,
    EndpointError,
    status_problem,
    transport_problem,
)
from skillsft.pipeline.teacher.openai.ratelimit_headers import parse_retry_after
from skillsft.pipeline.teacher.openai.runtime import (
    CHAT_COMPLETIONS_PATH,
    TeacherRuntime,
    runtime_for,
)
from skillsft.pipeline.teacher.openai.stream import AHEAD_PER_SLOT, RequestWindow
from skillsft.pipeline.teacher.openai.structured import (
    RESPONSE_MODES,
    AnswerProblem,
    Messages,
    ResponseMode,
    answer_schema,
    messages_for_mode,
    parse_answer,
    reask_messages,
    response_format,
)
from skillsft.pipeline.teacher.pricing import PriceTable
from skillsft.pipeline.teacher.progress import BatchTracker
from skillsft.pipeline.teacher.settings import TeacherSettings, require_api_key
from skillsft.pipeline.teacher.usage import read_usage, warn_missing_usage

log = logging.getLogger("skillsft.teacher")

# o1, o3, o3-mini, o4-mini, the gpt-5 family, and DeepSeek's reasoner (optionally behind a
# "vendor/" prefix): they reject temperature and take max_completion_tokens.
_REASONING_MODEL = re.compile(r"^(o\d+(-.*)?|gpt-5.*|deepseek-reasoner.*)$")
PROBE_PROMPT_VERSION = "probe/1"

RATE_LIMIT_ROUNDS = 4  # extra rounds for a 429, beyond max_retries


def failed_result(
    request: TeacherRequest[Any], error: str, raw_text: str | None, prompt_tokens: int,
    completion_tokens: int, attempts: int,
) -> TeacherResult[Any]:
    """A request's recorded failure: the reason, the last raw answer and what it cost."""
    return TeacherResult(
        request_id=request.request_id, answer=None, error=error, raw_text=raw_text,
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, attempts=attempts,
    )


def is_reasoning_model(model: str) -> bool:
    return bool(_REASONING_MODEL.match(model.rsplit("/", 1)[-1]))


def generation_parameters(model: str, settings: TeacherSettings) -> dict[str, Any]:
    """Reasoning models reject temperature and want max_completion_tokens."""
    if is_reasoning_model(model):
        return {"max_completion_tokens": settings.max_output_tokens}
    return {"temperature": settings.temperature, "max_tokens": settings.max_output_tokens}


def chat_completion_fields(body: bytes) -> dict[str, Any] | None:
    """A chat completion's JSON as a dict, or None when the body is not one."""
    try:
        completion = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
        return None
    return completion


class _CallFailed(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class _Refused(Exception):
    """The server refused a request because of the response mode it was sent in."""

    def __init__(self, mode: ResponseMode, detail: str) -> None:
        super().__init__(detail)
        self.mode = mode
        self.detail = detail


@dataclass
class _Paced:
    """What one call took of the --rpm/--tpm windows: start times (None: no such cap)."""

    request: float | None = None
    tokens_at: float | None = None
    tokens: int = 0


class OpenAITeacher:
    name = "openai"

    def __init__(
        self,
        settings: TeacherSettings,
        journal_dir: Path,
        stage: str,
        *,
        prices: PriceTable | None = None,
    ) -> None:
        require_api_key(settings)
        self.settings = settings
        self.stage = stage
        self.model = settings.model_for(stage)
        self.endpoint = settings.endpoint()
        self.shown_endpoint = redact_url(self.endpoint)
        self.journal_dir = Path(journal_dir)
        self.journal = Journal(self.journal_dir / f"teacher_{stage}.jsonl")
        self.prices = prices or PriceTable.with_overrides(
            settings.price_file, settings.price_overrides
        )
        self.parameters = generation_parameters(self.model, settings)
        self.peak_in_flight = 0  # of the last batch, for tests and benchmarks
        self.final_limit = 0.0  # the adaptive limit at the end of the last batch
        self.peak_held = 0  # most requests the last stream held at once (stream.py)

    @property
    def runtime(self) -> TeacherRuntime:
        """This process's runtime for the endpoints and model (runtime.py): looked up, not
        kept, so a teacher carried into a forked worker uses the worker's own."""
        return runtime_for(self.settings, self.model, self.journal_dir)

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], Any]:
        return self.runtime.run(self.arun_batch(requests, stage=stage))

    def stream_batch(
        self, requests: Iterable[TeacherRequest[Any]], *, stage: str
    ) -> AnswerStream:
        """`run_batch` as a stream (base.answer_stream): requests are pulled as the window
        (stream.py) has room, results come back in request order as they are ready; the stats
        and peak_in_flight/final_limit are those one batch of the same requests gets, and the
        bar is that batch's, except that its total is the requests built so far."""
        stream = AnswerStream(BatchStats(stage=stage, model=self.model))
        stream.results = self._stream(iter(requests), stage, stream)
        return stream

    def _stream(self, requests: Iterator[TeacherRequest[Any]], stage: str,
                stream: AnswerStream) -> Iterator[TeacherResult[Any]]:
        tracker = BatchTracker(stage, self.model, 0, prices=self.prices,
                               show_progress=self.settings.show_progress)
        stream.stats = tracker.stats
        run = _BatchRun(self, tracker)
        runtime, limiter = run.runtime, run.runtime.limiter
        limiter.peak = limiter.in_flight
        self.journal.refresh()
        window = RequestWindow(requests, lambda r: self.key_for(r.messages, r), run.answer,
                               tracker, AHEAD_PER_SLOT * self.settings.concurrency_ceiling())
        try:
            while ready := runtime.run(window.next_ready()):
                yield from ready
        finally:
            runtime.run(window.close())
            stream.stats = tracker.close()
            self.peak_in_flight = limiter.peak
            self.final_limit = limiter.limit
            self.peak_held = window.peak_held

    def negotiate(self) -> ResponseMode:
        """The response mode requests will start in, probing now if it is not known yet (the
        pre-flight). A probe that fails for another reason than the format raises
        preflight.EndpointError with a one-line message."""

        async def settle() -> ResponseMode:
            tracker = BatchTracker("check", self.model, 0, prices=self.prices, show_progress=False)
            return await _BatchRun(self, tracker, probe_problems_raise=True).current_mode()

        return self.runtime.run(settle())

    async def arun_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], Any]:
        """Answer a batch; results come back in request order, one per request. Runs on the
        runtime's event loop (`run_batch`)."""
        tracker = BatchTracker(
            stage,
            self.model,
            len(requests),
            prices=self.prices,
            show_progress=self.settings.show_progress,
        )
        run = _BatchRun(self, tracker)
        limiter = run.runtime.limiter
        limiter.peak = limiter.in_flight
        self.journal.refresh()
        # Identical rendered requests are asked once and share the answer.
        positions: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            positions.setdefault(self.key_for(request.messages, request), []).append(index)
        results: list[TeacherResult[Any] | None] = [None] * len(requests)

        async def answer_group(key: str, indexes: list[int]) -> None:
            first = requests[indexes[0]]
            result = await run.answer(first, key)
            for index in indexes:
                results[index] = replace(result, request_id=requests[index].request_id)
                tracker.finished(results[index])  # type: ignore[arg-type]

        try:
            await asyncio.gather(*(answer_group(k, ix) for k, ix in positions.items()))
        finally:
            stats = tracker.close()
            self.peak_in_flight = limiter.peak
            self.final_limit = limiter.limit
        return [result for result in results if result is not None], stats

    def key_for(self, messages: Messages, request: TeacherRequest[Any]) -> str:
        return chat_key(self.model, self.parameters, messages, request)


class _BatchRun:
    """One batch: its tracker, over the process's runtime (clients, limits, pool, mode)."""

    def __init__(
        self, teacher: OpenAITeacher, tracker: BatchTracker, *, probe_problems_raise: bool = False
    ) -> None:
        self.teacher = teacher
        self.probe_problems_raise = probe_problems_raise
        self.settings = teacher.settings
        self.tracker = tracker
        self.runtime = teacher.runtime
        self.limiter = self.runtime.limiter
        self.pool = self.runtime.pool

    # One request, start to finish ------------------------------------------------------------

    async def answer(self, request: TeacherRequest[Any], key: str) -> TeacherResult[Any]:
        journal = self.teacher.journal
        state = self._replay(request, key)
        if isinstance(state, TeacherResult):
            return state
        claim = await journal.claim(key)
        try:
            journal.refresh()  # another process may have answered while we waited
            state = self._replay(request, key)
            if isinstance(state, TeacherResult):
                return state
            earlier = journal.failures(key)
            reason = skip_reason(earlier, self.settings.retry_failed, self.settings.retry_forced)
            if reason is not None:
                return failed_result(request, reason, None, 0, 0, 0)
            result = await self._converse(request, state)
            if not result.ok:
                await journal.append_async(JournalRecord(
                    key=key, kind="failure", stage=self.teacher.stage,
                    request_id=request.request_id, time=time.time(), error=result.error,
                ))
                result.retryable = retryable_after([*earlier, result.error or ""],
                                                   self.settings.retry_failed)
            return result
        finally:
            claim.release()

    def _replay(self, request: TeacherRequest[Any], key: str) -> TeacherResult[Any] | Step:
        """Follow the request's conversation through the journal as far as it goes
        (conversation.py). A valid answer found there is a hit. An invalid one is never a hit:
        its re-ask is looked up next. A conversation that ended invalid starts afresh (the
        model is asked again), which is where live and batch differ."""
        followed = follow(self.teacher.journal, request, self.teacher.key_for,
                          self.settings.reask_limit, when_exhausted="ask_again", first_key=key)
        if followed.result is not None:
            return followed.result
        assert followed.step is not None
        return followed.step

    async def _converse(self, request: TeacherRequest[Any], state: Step) -> TeacherResult[Any]:
        messages, attempt = state.messages, state.attempt
        prompt_tokens, completion_tokens = state.prompt_tokens, state.completion_tokens
        raw_text: str | None = None
        while True:
            try:
                record = await self._call(request, messages)
            except _CallFailed as failure:
                error = f"{failure.kind}: {failure.detail}"
                return failed_result(request, error, raw_text, prompt_tokens, completion_tokens,
                                     attempt)
            raw_text = record.raw_text
            prompt_tokens += record.prompt_tokens
            completion_tokens += record.completion_tokens
            attempt += 1
            try:
                answer = parse_answer(raw_text, record.finish_reason, request.answer_model)
            except AnswerProblem as problem:
                if attempt > self.settings.reask_limit:
                    error = f"{problem.kind}: {problem.detail} (after {attempt} answers)"
                    return failed_result(request, error, raw_text, prompt_tokens,
                                         completion_tokens, attempt)
                messages = reask_messages(messages, raw_text, problem)
                continue
            return TeacherResult(
                request_id=request.request_id,
                answer=answer,
                raw_text=raw_text,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                attempts=attempt,
            )

    # One model answer ----------------------------------------------------------------------

    async def _call(self, request: TeacherRequest[Any], messages: Messages) -> JournalRecord:
        """Get one raw answer for these messages, journaled before it is returned."""
        teacher = self.teacher
        key = teacher.key_for(messages, request)
        await self.current_mode()
        floor = 0  # weakest mode this request has been refused in, plus one
        while True:
            try:
                record = await self._create(request, messages, floor, key)
            except _Refused as refusal:
                floor = RESPONSE_MODES.index(refusal.mode) + 1
                if floor < len(RESPONSE_MODES) and self.settings.response_format == "auto":
                    log.info("%s refused response mode %s (%s); trying %s",
                             teacher.shown_endpoint, refusal.mode, refusal.detail[:300],
                             RESPONSE_MODES[floor])
                    self._learn(RESPONSE_MODES[floor])
                    continue
                detail = f"the server refused response mode {refusal.mode}: {refusal.detail}"
                raise await self._failed(request, key, "format_refused", detail) from None
            except _CallFailed as failure:
                raise await self._failed(request, key, failure.kind, failure.detail) from None
            self.tracker.paid(teacher.model, record.prompt_tokens, record.completion_tokens,
                              record.cached_prompt_tokens)
            self.limiter.on_success()
            return record

    # The response mode ---------------------------------------------------------------------

    def _learn(self, mode: ResponseMode) -> None:
        """Step down to `mode` (never up: a refusal seen is not forgotten within a run) and keep
        it for other processes and later runs."""
        known = self.runtime.mode
        if known is not None and RESPONSE_MODES.index(mode) <= RESPONSE_MODES.index(known):
            return
        self.runtime.mode = mode
        self.runtime.modes.put(self.teacher.endpoint, self.teacher.model, mode)

    async def current_mode(self) -> ResponseMode:
        """The mode requests start in: forced, else known (this process's runtime, then the
        work dir, where other processes and earlier runs left it), else probed now, once,
        before the first paid request."""
        if self.settings.response_format != "auto":
            return self.settings.response_format  # type: ignore[return-value]
        if self.runtime.mode is not None:
            return self.runtime.mode
        async with self.runtime.mode_lock:
            if self.runtime.mode is None:
                known = self.runtime.modes.get(self.teacher.endpoint, self.teacher.model)
                if known in RESPONSE_MODES:
                    self.runtime.mode = known
                else:
                    await self._probe_once()
        assert self.runtime.mode is not None
        return self.runtime.mode

    async def _probe_once(self) -> None:
        """Probe unless another process (holding the same claim) just did."""
        teacher = self.teacher
        store_key = ModeStore.key(teacher.endpoint, teacher.model)
        claim = await teacher.journal.claim("probe-" + url_digest(store_key))
        try:
            known = self.runtime.modes.get(teacher.endpoint, teacher.model)
            if known in RESPONSE_MODES:
                self.runtime.mode = known
                return
            probed = await self._probe()
            if probed is None:
                self.runtime.mode = RESPONSE_MODES[0]  # unknown: refusals will teach us
            else:
                self._learn(probed)
        finally:
            claim.release()

    async def _probe_call(
        self, probe: TeacherRequest[Any], key: str, parameters: dict[str, Any], body: bytes,
        mode: ResponseMode,
    ) -> JournalRecord:
        """One probe request. Transient failures (429, 5xx, a dropped connection) are retried
        here, briefly, and never a refusal: llama-cpp-python refuses with a 500, and the
        client's own backoff would spend seconds on each."""
        timeout = httpx2.Timeout(min(self.settings.timeout, 60.0), connect=CONNECT_DEADLINE_S)
        attempt = 0
        while True:
            paced = await self._pace(probe.messages, int(parameters.get(
                "max_tokens", parameters.get("max_completion_tokens", 0))))
            answered: tuple[JournalRecord, bool] | None = None
            started = time.monotonic()
            wait: float | None = None
            with self.pool.use() as endpoint:
                client = endpoint.client.with_options(max_retries=0, timeout=timeout)
                try:
                    answer = await client.post(CHAT_COMPLETIONS_PATH, cast_to=httpx2.Response,
                                               content=body)
                    self.pool.succeeded(endpoint)
                    answered = await self._journal_response(
                        probe, key, answer.content, time.monotonic() - started, mode)
                    return answered[0]
                except openai.APIStatusError as exc:
                    transient = (exc.status_code == 429 and exc.code != "insufficient_quota") or (
                        exc.status_code >= 500)
                    if exc.status_code >= 500 and not is_format_refusal(exc):
                        self.pool.failed(endpoint, str(exc))
                    if is_format_refusal(exc) or not transient or (
                            attempt >= self.settings.max_retries):
                        raise
                    wait = parse_retry_after(exc.response.headers)
                except openai.APITimeoutError:
                    raise
                except openai.APIConnectionError as exc:
                    self.pool.failed(endpoint, str(exc))
                    if attempt >= self.settings.max_retries:
                        raise
                finally:
                    self._paced(paced, answered)
            await asyncio.sleep(wait if wait is not None else min(4.0, 0.25 * 2**attempt))
            attempt += 1

    async def _probe(self) -> ResponseMode | None:
        """One tiny request per mode, best first; the first mode that works. None when the probe
        failed for another reason (the requests themselves then meet and report it)."""
        teacher = self.teacher
        parameters = dict(teacher.parameters)
        if not is_reasoning_model(teacher.model):
            parameters["max_tokens"] = min(PROBE_MAX_TOKENS, self.settings.max_output_tokens)
        asked = ({"role": "user", "content": PROBE_PROMPT},)
        for mode in RESPONSE_MODES:
            messages = messages_for_mode(asked, mode, ProbeAnswer)
            format_parameter = response_format(mode, ProbeAnswer)
            # the bytes a stage's request would send in this mode (chat_request.py)
            body = body_bytes(chat_body(teacher.model, asked, parameters, mode, ProbeAnswer))
            key = request_key(
                model=teacher.model, messages=messages,
                parameters={**parameters, "response_format": format_parameter},
                answer_schema=answer_schema(ProbeAnswer), prompt_version=PROBE_PROMPT_VERSION,
            )
            probe: TeacherRequest[ProbeAnswer] = TeacherRequest(
                request_id=f"probe:{mode}", kind="probe", messages=tuple(messages),
                answer_model=ProbeAnswer, prompt_version=PROBE_PROMPT_VERSION,
            )
            try:
                record = await self._probe_call(probe, key, parameters, body, mode)
            except openai.APIStatusError as exc:
                if is_format_refusal(exc):
                    await self._failed(probe, key, "format_refused", str(exc))
                    log.info("%s model %s refused response mode %s",
                             teacher.shown_endpoint, teacher.model, mode)
                    continue
                await self._failed(probe, key, f"http_{exc.status_code}", str(exc))
                if self.probe_problems_raise:
                    body = str(exc.body) if exc.body is not None else exc.message
                    raise status_problem(teacher.endpoint, teacher.model, exc.status_code, body) \
                        or EndpointError(
                            f"{teacher.shown_endpoint}: a minimal request for model "
                            f"{teacher.model!r} failed with HTTP {exc.status_code} "
                            f"({scrub(exc.message, teacher.endpoint)[:160]})") from None
                return None
            except (openai.APIError, _CallFailed) as exc:
                await self._failed(probe, key, "probe_failed", str(exc))
                if self.probe_problems_raise:
                    if isinstance(exc, _CallFailed):  # a 200 that is not a chat completion
                        raise EndpointError(f"{teacher.shown_endpoint}: {exc.detail}") from None
                    cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
                    if isinstance(exc, openai.APITimeoutError):
                        cause = httpx2.ReadTimeout(str(exc))
                    raise transport_problem(teacher.endpoint, cause) from None
                return None
            self.tracker.paid(teacher.model, record.prompt_tokens, record.completion_tokens)
            try:
                parse_answer(record.raw_text, record.finish_reason, ProbeAnswer)
                valid = True
            except AnswerProblem:
                valid = False
            if mode_is_confirmed(mode, valid):
                log.info("%s model %s: response mode %s", teacher.shown_endpoint,
                         teacher.model, mode)
                return mode
            log.info("%s model %s accepted response mode %s but did not enforce the schema",
                     teacher.shown_endpoint, teacher.model, mode)
        return RESPONSE_MODES[-1]

    async def _journal_response(
        self, request: TeacherRequest[Any], key: str, body: bytes, latency: float,
        mode: ResponseMode,
    ) -> tuple[JournalRecord, bool]:
        """Journal the raw response (fsynced) before anyone uses it; the record, and whether
        the answer said what it used. Called while the request still holds its concurrency
        slot, so at any instant at most `concurrency` paid answers are not yet on disk: that is
        all a kill -9 can make us pay twice.

        The body is read as JSON here, not through the SDK's response models: the fields we
        keep are few, and building the models cost about a fifth of a request's CPU."""
        teacher = self.teacher
        completion = chat_completion_fields(body)
        if completion is None:  # e.g. a proxy's HTML page with status 200
            raise _CallFailed(
                "bad_response",
                f"the endpoint answered {body[:200]!r}, not a chat completion; is the base URL "
                "an OpenAI-compatible /v1 endpoint?",
            )
        choices = completion.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        raw_text = message.get("content") if isinstance(message, dict) else None
        usage = read_usage(completion.get("usage"), "".join(
            str(m.get("content", "")) for m in request.messages), raw_text)
        if usage.estimated:
            warn_missing_usage(teacher.shown_endpoint, teacher.model)
        record = JournalRecord(
            key=key,
            kind="response",
            stage=teacher.stage,
            request_id=request.request_id,
            model=completion.get("model") or teacher.model,
            raw_text=raw_text,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_prompt_tokens=usage.cached_prompt_tokens,
            usage_estimated=usage.estimated,
            latency_s=latency,
            time=time.time(),
            response_mode=mode,
        )
        await teacher.journal.append_async(record)
        return record, not usage.estimated

    async def _create(
        self, request: TeacherRequest[Any], messages: Messages, floor: int, key: str
    ) -> JournalRecord:
        """One chat completion through the limiter and caps, journaled before the slot is freed.

        The response mode is chosen once a slot is held, so requests queued behind the first
        refusal already use what the endpoint was found to accept.
        """
        give_up_at = time.monotonic() + self.settings.deadline()
        retries = rate_limited = 0
        runtime = self.runtime
        while True:
            wait: float | None = None
            # The process's own limit first, then one of the machine's slots (slots.py), so the
            # limit holds across every worker process of this machine; then the pace, last, so
            # a call counted as started is sent at once (counted earlier, calls held up by the
            # slots would reach the server bunched, more than the cap within one window).
            async with self.limiter.slot(), runtime.slots.slot():
                paced = await self._pace(messages, self.settings.max_output_tokens)
                answered: tuple[JournalRecord, bool] | None = None
                current = await self.current_mode()
                mode = RESPONSE_MODES[max(floor, RESPONSE_MODES.index(current))]
                # Our own bytes (chat_request.py), the same a batch line of this request
                # carries; posted raw through the client's connections (posting.py: the SDK's
                # headers and errors, none of its per-request work), so it neither walks the
                # schema for type coercion nor reorders it.
                body = body_bytes(chat_body(self.teacher.model, messages, self.teacher.parameters,
                                            mode, request.answer_model))
                started = time.monotonic()
                self.tracker.call_started(request.request_id, started)
                call_timeout = min(self.settings.timeout, max(0.1, give_up_at - started))
                endpoint = self.pool.pick()
                poster = runtime.posters[endpoint.url]
                endpoint.in_flight += 1
                endpoint.sent += 1
                try:
                    answer = await poster.post(body, None if call_timeout == self.settings.timeout
                                               else call_timeout)  # the deadline is near
                    self.pool.succeeded(endpoint)
                    latency = time.monotonic() - started
                    answered = await self._journal_response(request, key, answer, latency, mode)
                    return answered[0]
                except openai.RateLimitError as exc:
                    if exc.code == "insufficient_quota":  # no amount of waiting will help
                        raise _CallFailed("quota_exhausted", str(exc)) from exc
                    rate_limited += 1
                    if rate_limited > self.settings.max_retries + RATE_LIMIT_ROUNDS:
                        raise _CallFailed("rate_limited", str(exc)) from exc
                    failure = _CallFailed("rate_limited", str(exc))
                    wait = parse_retry_after(exc.response.headers)
                except openai.APIStatusError as exc:
                    if is_format_refusal(exc):
                        raise _Refused(mode, str(exc)) from exc
                    if exc.status_code == 400:
                        raise _CallFailed("bad_request", str(exc)) from exc
                    if exc.status_code < 500 and exc.status_code not in (408, 409):
                        raise _CallFailed(f"http_{exc.status_code}", str(exc)) from exc
                    failure = _CallFailed("server_error", str(exc))
                    wait = parse_retry_after(exc.response.headers)
                    retries += 1
                    if exc.status_code >= 500:
                        self.pool.failed(endpoint, str(exc))
                except openai.APITimeoutError:
                    failure = _CallFailed("timeout", f"no answer within {call_timeout:.1f}s")
                    retries += 1
                except openai.APIConnectionError as exc:
                    failure = _CallFailed("connection", str(exc))
                    retries += 1
                    self.pool.failed(endpoint, str(exc))
                except openai.APIError as exc:  # anything else the client raises: one request
                    raise _CallFailed("api_error", str(exc)) from exc
                finally:
                    endpoint.in_flight -= 1
                    self.tracker.call_ended(request.request_id)
                    self._paced(paced, answered)
            # Retried here, not inside the client, so the slot is free while we wait: a halved
            # limit then really holds back the pool.
            if retries > self.settings.max_retries:
                raise failure
            attempt = retries + rate_limited
            exponential = min(30.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            # A Retry-After is a floor: a short one repeated must not use up the rounds at once.
            backoff = max(wait or 0.0, exponential) if failure.kind == "rate_limited" else (
                wait if wait is not None else exponential)
            if time.monotonic() + backoff >= give_up_at:
                raise _CallFailed(failure.kind, f"{failure.detail} (gave up at the "
                                  f"{self.settings.deadline():.0f}s request deadline)")
            await asyncio.sleep(backoff)

    async def _pace(self, messages: Messages, max_output: int) -> "_Paced":
        """Wait for --rpm and --tpm (machine-wide, pace.py) to let one more call start. Every
        HTTP call counts, the retries and the probes included; `_paced` ends the count."""
        runtime = self.runtime
        paced = _Paced()
        if runtime.rpm is not None:
            paced.request = await runtime.rpm.take(1)
        if runtime.tpm is not None:
            chars = sum(len(m.get("content", "")) for m in messages)
            amount = chars // CHARS_PER_TOKEN + max_output
            paced.tokens = min(amount, runtime.tpm.cap)
            paced.tokens_at = await runtime.tpm.take(amount)
        return paced

    def _paced(self, paced: "_Paced", answered: tuple[JournalRecord, bool] | None) -> None:
        """The call has ended: the windows count it until a window from now, the token window
        at the usage the answer reported. An answer without usage keeps its reservation (said
        once per process: the cap then counts such a call at its estimate plus
        --max-output-tokens)."""
        runtime = self.runtime
        if runtime.rpm is not None and paced.request is not None:
            runtime.rpm.finish(paced.request, 1)
        if runtime.tpm is None or paced.tokens_at is None:
            return
        used = None
        if answered is not None:
            record, has_usage = answered
            if has_usage:
                used = record.prompt_tokens + record.completion_tokens
            elif not runtime.usage_missing_told:
                runtime.usage_missing_told = True
                log.warning("%s sends no token usage with its answers; --tpm counts each "
                            "request at its estimate plus --max-output-tokens",
                            self.teacher.shown_endpoint)
        runtime.tpm.finish(paced.tokens_at, paced.tokens, used)

    async def _failed(
        self, request: TeacherRequest[Any], key: str, kind: str, detail: str
    ) -> _CallFailed:
        """Journal a transport failure (for the record; never a hit) and return it to raise.

        The server's error text is kept, minus the API key: some servers echo the credential
        they refused, and this text reaches the journal and the reject files."""
        secret = self.settings.api_key.get_secret_value() if self.settings.api_key else ""
        if secret:
            detail = detail.replace(secret, "[api key]")
        detail = scrub(detail, self.teacher.endpoint)
        await self.teacher.journal.append_async(
            JournalRecord(
                key=key,
                kind="error",
                stage=self.teacher.stage,
                request_id=request.request_id,
                time=time.time(),
                error=f"{kind}: {detail}",
            )
        )
        return _CallFailed(kind, detail)
