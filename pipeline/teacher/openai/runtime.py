"""The teacher runtime: what a process keeps for one (endpoint set, model) across all its work.

A run is many `run_batch` calls: every shard, aggregation level, `--max-cost` chunk, the
preference thoughts, the pre-flight. What the teacher learns or builds once must outlive each of
them, so it lives here, once per process and (endpoint set, model, work dir, pace settings):

- one HTTP client per endpoint (connections.py), the poster that sends chat bodies through it
  (posting.py), and the event loop they run on (connections, and TLS sessions on a real
  provider, are reused from one batch to the next);
- the endpoint pool with its health (endpoint_pool.py: an endpoint taken out stays out);
- the adaptive concurrency limit (limits.py): the limit learned from 429s in one batch is where
  the next one starts;
- the machine-wide caps: the in-flight slots (slots.py) and the --rpm/--tpm windows (pace.py);
- the negotiated response mode (negotiation.py), settled by the pre-flight or the first batch.

`runtime_for` is the one way to get it. A process forked from one that had a runtime (Luigi
runs each task in a child when it has several workers) starts its own, with fresh clients and
loop, but inherits the verdicts: the limit, the endpoints taken out, the mode.

The event loop runs in a thread of its own (made on first use, one per process: a fork does not
copy threads, and the child's runtime makes its own). So it keeps running while the stage's
synchronous code works: answers are read, slots given back and new requests sent while the
stage builds its next requests or writes its outputs (stream.py). `run` is a submit-and-wait
from any other thread; an exception in the waiting thread (ctrl-C's KeyboardInterrupt in the
main thread) cancels the work, waits for its cleanup, then goes on.
"""

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from openai import AsyncOpenAI

from skillsft.pipeline.teacher.limits import AdaptiveLimiter
from skillsft.pipeline.teacher.machine import machine_folder
from skillsft.pipeline.teacher.openai.connections import endpoint_http_client
from skillsft.pipeline.teacher.openai.endpoint_pool import EndpointPool
from skillsft.pipeline.teacher.openai.endpoints import split_query, url_digest
from skillsft.pipeline.teacher.openai.negotiation import ModeStore
from skillsft.pipeline.teacher.openai.posting import ChatPoster
from skillsft.pipeline.teacher.openai.ratelimit_headers import (
    exhausted_budget_pause,
    parse_retry_after,
)
from skillsft.pipeline.teacher.openai.structured import ResponseMode
from skillsft.pipeline.teacher.pace import MachineWindow, scaled_cap
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.pipeline.teacher.slots import MachineSlots, machine_slots

log = logging.getLogger("skillsft.teacher")
T = TypeVar("T")

# What the runtime depends on besides the model and the work dir: how it talks and paces.
# The rest (temperature, retries, re-asks, --force) is read per request from the teacher.
CHAT_COMPLETIONS_PATH = "/chat/completions"  # under the endpoint's base URL (…/v1)
RUNTIME_SETTINGS = {"base_url", "concurrency", "max_concurrency", "timeout", "rpm", "tpm",
                    "rate_window"}


@dataclass(frozen=True)
class RuntimeKey:
    endpoint: str
    model: str
    journal_dir: str
    settings: str  # RUNTIME_SETTINGS as JSON
    key_digest: str  # of the API key: another key is another client


def runtime_key(settings: TeacherSettings, model: str, journal_dir: Path) -> RuntimeKey:
    secret = settings.api_key.get_secret_value() if settings.api_key else ""
    return RuntimeKey(settings.endpoint(), model, str(Path(journal_dir).resolve()),
                      settings.model_dump_json(include=RUNTIME_SETTINGS),
                      hashlib.sha256(secret.encode()).hexdigest())


class TeacherRuntime:
    def __init__(self, settings: TeacherSettings, model: str, journal_dir: Path,
                 inherited: "TeacherRuntime | None" = None) -> None:
        self.settings = settings
        self.model = model
        self.endpoint = settings.endpoint()
        self.pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        ceiling = settings.concurrency_ceiling()
        self.limiter = AdaptiveLimiter(ceiling, start=settings.concurrency)
        # one poster per endpoint URL, over that endpoint's client (posting.py)
        self.posters: dict[str, ChatPoster] = {}
        self.pool: EndpointPool[AsyncOpenAI] = EndpointPool(
            self.endpoint, self._client_for,
            out_until=inherited.pool.out_until() if inherited else None)
        self.modes = ModeStore(Path(journal_dir) / "response_modes.json")
        self.mode: ResponseMode | None = None  # what requests start in, once settled
        self.mode_lock = asyncio.Lock()
        self.slots: MachineSlots = machine_slots(Path(journal_dir), ceiling)
        self.rpm = self._window(journal_dir, "rpm", settings.rpm)
        self.tpm = self._window(journal_dir, "tpm", settings.tpm)
        self.usage_missing_told = False
        if inherited is not None:
            self.limiter.limit = inherited.limiter.limit
            self.mode = inherited.mode

    def _window(self, journal_dir: Path, kind: str, per_minute: int | None
                ) -> MachineWindow | None:
        if per_minute is None:
            return None
        window_s = self.settings.rate_window
        path = machine_folder(journal_dir, "pace") / f"{kind}-{url_digest(self.endpoint)}"
        return MachineWindow(path, scaled_cap(per_minute, window_s), window_s=window_s)

    def _client_for(self, url: str) -> AsyncOpenAI:
        http_client = endpoint_http_client(self.settings.concurrency_ceiling() * 2,
                                           self._watch_rate_limits)
        assert self.settings.api_key is not None
        base_url, query = split_query(url)
        client = AsyncOpenAI(
            api_key=self.settings.api_key.get_secret_value(),
            base_url=base_url,
            default_query=query or None,
            timeout=self.settings.timeout,
            # Every retry is ours (openai/teacher.py `_create`), made after the concurrency
            # slot is given back: the client's own would wait while holding it.
            max_retries=0,
            http_client=http_client,
        )
        self.posters[url] = ChatPoster(client, http_client, CHAT_COMPLETIONS_PATH)
        return client

    async def _watch_rate_limits(self, response: httpx2.Response) -> None:
        """Every answer passes here: a 429 halves the limit and pauses new starts for its
        Retry-After; a spent x-ratelimit budget pauses them until its reset."""
        if response.status_code == 429:
            self.limiter.on_rate_limited(parse_retry_after(response.headers))
        elif (pause := exhausted_budget_pause(response.headers)) is not None:
            self.limiter.pause_for(pause)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The runtime's event loop, running in its own thread from the first use on."""
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=self._serve, args=(loop,),
                                          name="skillsft-teacher-loop", daemon=True)
                # daemon: the atexit hook (close) stops it; a non-daemon thread would be
                # waited for before atexit hooks run, i.e. forever.
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    def in_loop_thread(self) -> bool:
        return self._thread is threading.current_thread()

    def submit(self, works: "list[Coroutine[Any, Any, T]]",
               running: "set[asyncio.Task[Any]] | None" = None,
               then: Callable[[], None] | None = None) -> "list[concurrent.futures.Future[T]]":
        """Start each of `works` as a task on the loop, from any thread, in one hand-over (one
        wake-up of the loop for them all); each future is settled when its task has ended
        (not when it is asked to stop). `running`, a set only the loop touches, holds each
        task while it runs, so its owner can cancel what is left (on the loop). `then` runs on
        the loop in the same hand-over, after the tasks are made."""
        loop = self.loop
        outcomes: list[concurrent.futures.Future[T]] = [
            concurrent.futures.Future() for _ in works]

        def start() -> None:
            for work, outcome in zip(works, outcomes, strict=True):
                task = loop.create_task(work)
                if running is not None:
                    running.add(task)
                    task.add_done_callback(running.discard)
                task.add_done_callback(functools.partial(_settle, outcome))
            if then is not None:
                then()

        loop.call_soon_threadsafe(start)
        return outcomes

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` on this runtime's event loop (the one its clients' connections live on)
        and wait for its result; from synchronous code in any thread but the loop's own.

        An exception raised in the waiting thread (KeyboardInterrupt: ctrl-C) cancels the
        work and waits until it has run its cleanup (the `finally` blocks, the claims given
        back), then propagates, as `asyncio.run` does on ctrl-C."""
        if self.in_loop_thread():
            work.close()
            raise RuntimeError("TeacherRuntime.run called from the runtime's own event loop")
        running: set[asyncio.Task[Any]] = set()
        [outcome] = self.submit([work], running)
        try:
            return outcome.result()
        except BaseException:
            if not outcome.done():  # interrupted while waiting: the work is still running
                self.loop.call_soon_threadsafe(_cancel_all, running)  # after the task's start
                with contextlib.suppress(BaseException):
                    outcome.result()
            raise

    def close(self) -> None:
        """Close the clients, stop the loop and its thread (at exit, or when a test starts
        afresh). A forked child's copy of its parent's runtime has no thread: nothing to do."""
        if self._loop is None or self.pid != os.getpid():
            return
        with contextlib.suppress(Exception):
            self.run(self._close_clients())
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        if not loop.is_running():
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _close_clients(self) -> None:
        for client in self.pool.clients():
            await client.close()


def _cancel_all(tasks: "set[asyncio.Task[Any]]") -> None:
    for task in list(tasks):
        task.cancel()


def _settle(outcome: "concurrent.futures.Future[T]", task: "asyncio.Task[T]") -> None:
    """Hand a finished task's result, exception or cancellation to the waiting thread."""
    if task.cancelled():
        outcome.cancel()
    elif (error := task.exception()) is not None:
        outcome.set_exception(error)
    else:
        outcome.set_result(task.result())


_RUNTIMES: dict[RuntimeKey, TeacherRuntime] = {}


def runtime_for(settings: TeacherSettings, model: str, journal_dir: Path) -> TeacherRuntime:
    """This process's runtime for (endpoint set, model, work dir, pace settings), made on first
    use; in a forked child, a new one that inherits what its parent's had learned."""
    key = runtime_key(settings, model, journal_dir)
    runtime = _RUNTIMES.get(key)
    if runtime is None or runtime.pid != os.getpid():
        runtime = TeacherRuntime(settings, model, journal_dir, inherited=runtime)
        _RUNTIMES[key] = runtime
    return runtime


def close_runtimes() -> None:
    """Close and forget every runtime of this process: the next use starts as a new process
    would (at exit; between tests)."""
    for runtime in list(_RUNTIMES.values()):
        runtime.close()
    _RUNTIMES.clear()


atexit.register(close_runtimes)
