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
"""

import asyncio
import atexit
import contextlib
import hashlib
import logging
import os
from collections.abc import Coroutine
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
        self._runner: asyncio.Runner | None = None
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

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` on this runtime's event loop (the one its clients' connections live on);
        from synchronous code only, like `asyncio.run`."""
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(work)

    def close(self) -> None:
        """Close the clients and the loop (at exit, or when a test starts afresh)."""
        if self._runner is None or self.pid != os.getpid():
            return
        runner, self._runner = self._runner, None
        with contextlib.suppress(Exception):
            runner.run(self._close_clients())
        runner.close()

    async def _close_clients(self) -> None:
        for client in self.pool.clients():
            await client.close()


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
