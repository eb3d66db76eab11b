"""How many teacher calls may be in flight, and how fast they may start.

`AdaptiveLimiter` is a semaphore whose limit moves: it starts at `start` (--concurrency), grows
by about +1 per window of successful calls up to `max_limit` (--max-concurrency), and halves
when the server answers 429, at most once per cooldown so a burst of 429s from one overload
counts once. Against a server that takes N at a time it settles around N. A 429's Retry-After
also pauses new starts until it has passed, so the whole pool backs off, not just the rejected
call.

The --rpm/--tpm caps are machine-wide, in pace.py.
"""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress


class AdaptiveLimiter:
    def __init__(
        self, max_limit: int, *, start: int | None = None, min_limit: int = 1,
        cooldown_s: float = 1.0,
    ) -> None:
        self.max_limit = max_limit
        self.min_limit = min_limit
        self.limit = float(min(max_limit, start or max_limit))
        self.cooldown_s = cooldown_s
        self.in_flight = 0
        self.peak = 0
        self.decreases = 0
        self._pause_until = 0.0
        self._last_decrease = float("-inf")
        self._changed = asyncio.Condition()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            await self.release()

    async def acquire(self) -> None:
        async with self._changed:
            while True:
                wait = self._pause_until - time.monotonic()
                if wait <= 0 and self.in_flight < int(self.limit):
                    break
                if wait > 0:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), timeout=wait)
                else:
                    await self._changed.wait()
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    async def release(self) -> None:
        async with self._changed:
            self.in_flight -= 1
            # Wake only as many waiters as there are free slots (normally one): waking them all
            # makes every release cost O(queued requests), quadratic over a large batch.
            self._changed.notify(max(1, int(self.limit) - self.in_flight))

    def on_success(self) -> None:
        if self.limit < self.max_limit:
            self.limit = min(self.max_limit, self.limit + 1.0 / self.limit)

    def pause_for(self, seconds: float) -> None:
        """Hold new starts for `seconds` (at most two minutes)."""
        if seconds > 0:
            self._pause_until = max(self._pause_until, time.monotonic() + min(seconds, 120.0))

    def on_rate_limited(self, retry_after_s: float | None) -> None:
        """Halve the limit (once per cooldown) and hold new starts for Retry-After."""
        now = time.monotonic()
        if retry_after_s:
            self.pause_for(retry_after_s)
        if now - self._last_decrease >= self.cooldown_s:
            self.limit = max(float(self.min_limit), self.limit / 2)
            self._last_decrease = now
            self.decreases += 1
