"""A machine-wide limit on teacher requests in flight, shared by every process of one machine.

Sharded stages run in several processes at once (Luigi worker processes, several `skillsft run`
commands); each has its own in-process limiter (limits.AdaptiveLimiter), so without more the
machine would send workers x limit requests at a time. Before a request is sent, its process
takes one of `limit` slots: slot files `slot-000 ...` in the run's folder of the machine-local
runtime folder (machine.py; never the work dir, which machines may share), each held by an
exclusive non-blocking `flock` on a descriptor of this process. A process that dies drops its
locks with its descriptors, so a kill -9 never leaks a slot.

We chose this over Luigi resources: a resource limits how many *tasks* run at once, for the
whole scheduler (every machine), not how many requests are in flight on one machine. Giving each
shard task a share of the limit would leave slots idle while one shard finishes its tail and
another waits; slots taken per request let whoever has work use the whole limit. Each machine
has its own folder, so its own limit.

Descriptors are opened per process (a forked child opens its own: an inherited descriptor would
share its parent's lock), and the slots this process holds are remembered in memory, so a
process never waits on a slot it holds itself.

While every slot is taken, a process's waiting requests queue in order and one task polls the
files for them (each request polling on its own tried every lock hundreds of times a second,
CPU that two worker processes on a 2-core machine need for their work). A slot this process
gives back while it has waiters passes straight to the first, still locked: no poll between
two of its requests, and no other process takes it meanwhile, so two processes keep the slots
they hold busy and meet only over those one of them frees when it runs out of work (found
within POLL_SECONDS).
"""

import asyncio
import collections
import contextlib
import fcntl
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

from skillsft.pipeline.teacher.machine import machine_folder

POLL_SECONDS = 0.003  # how often a process waiting for a slot held elsewhere looks again


class MachineSlots:
    def __init__(self, folder: Path, limit: int) -> None:
        self.folder = Path(folder)
        self.limit = max(1, limit)
        self._pid = -1
        self._fds: list[int] = []
        self._held: set[int] = set()
        # This process's requests waiting for a slot, in arrival order, and the one task that
        # polls the files for them; both belong to one event loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: collections.deque[asyncio.Future[int]] = collections.deque()
        self._poller: asyncio.Task[None] | None = None

    def _open(self) -> None:
        if self._pid == os.getpid():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fds = [os.open(self.folder / f"slot-{i:03d}", os.O_RDWR | os.O_CREAT, 0o666)
                     for i in range(self.limit)]
        self._held = set()
        self._waiting = collections.deque()
        self._poller = None
        self._pid = os.getpid()

    def try_take(self) -> int | None:
        """A free slot's number, now held by this process, or None when all are taken."""
        self._open()
        start = random.randrange(self.limit)
        for step in range(self.limit):
            number = (start + step) % self.limit
            if number in self._held:
                continue
            try:
                fcntl.flock(self._fds[number], fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            self._held.add(number)
            return number
        return None

    def give_back(self, number: int) -> None:
        """Done with slot `number`: it passes to this process's first waiter, still locked,
        else its lock is released for any process to take."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(number)
                return
        self._held.discard(number)
        fcntl.flock(self._fds[number], fcntl.LOCK_UN)

    def _queue_for(self, loop: asyncio.AbstractEventLoop) -> None:
        """Forget waiters of another event loop (a process that ran an earlier one)."""
        if self._loop is not loop:
            self._loop, self._waiting, self._poller = loop, collections.deque(), None

    async def _poll(self) -> None:
        """While this process has waiters: take any slot another process frees, for the first."""
        while True:
            while self._waiting and self._waiting[0].done():  # cancelled while waiting
                self._waiting.popleft()
            if not self._waiting:
                return
            number = self.try_take()
            if number is None:
                await asyncio.sleep(POLL_SECONDS)
            else:
                self.give_back(number)

    async def _wait_for_slot(self) -> int:
        loop = asyncio.get_running_loop()
        self._queue_for(loop)
        waiter: asyncio.Future[int] = loop.create_future()
        self._waiting.append(waiter)
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll())
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot as it was cancelled
                self.give_back(waiter.result())
            raise

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        self._open()
        # Behind this process's waiters if it has any (first come, first served), else at once.
        number = None if self._waiting and self._loop is asyncio.get_running_loop() else (
            self.try_take())
        if number is None:
            number = await self._wait_for_slot()
        try:
            yield
        finally:
            self.give_back(number)


def machine_slots(journal_dir: Path, limit: int) -> MachineSlots:
    """The slots of the run whose journal is `journal_dir`, on this machine."""
    return MachineSlots(machine_folder(journal_dir, "slots"), limit)
