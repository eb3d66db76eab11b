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

While every slot is taken, one waiter per process polls the files and the others queue behind
it in order. With two worker processes on a 2-core machine, each waiting request polling on
its own would try every slot's lock hundreds of times a second, burning the CPU the other
process and the run need.
"""

import asyncio
import contextlib
import fcntl
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

from skillsft.pipeline.teacher.machine import machine_folder

POLL_SECONDS = 0.003  # how often a process waiting for a slot looks again


class MachineSlots:
    def __init__(self, folder: Path, limit: int) -> None:
        self.folder = Path(folder)
        self.limit = max(1, limit)
        self._pid = -1
        self._fds: list[int] = []
        self._held: set[int] = set()
        self._queue: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def _open(self) -> None:
        if self._pid == os.getpid():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fds = [os.open(self.folder / f"slot-{i:03d}", os.O_RDWR | os.O_CREAT, 0o666)
                     for i in range(self.limit)]
        self._held = set()
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
        self._held.discard(number)
        fcntl.flock(self._fds[number], fcntl.LOCK_UN)

    def _waiters(self) -> asyncio.Lock:
        """This process's queue of waiters, one per event loop (a lock is bound to one)."""
        loop = asyncio.get_running_loop()
        if self._queue is None or self._queue[0] is not loop:
            self._queue = (loop, asyncio.Lock())
        return self._queue[1]

    async def _wait_for_slot(self) -> int:
        async with self._waiters():  # the head of the queue polls, the rest wait their turn
            while (number := self.try_take()) is None:
                await asyncio.sleep(POLL_SECONDS)
            return number

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        number = self.try_take()
        if number is None:
            number = await self._wait_for_slot()
        try:
            yield
        finally:
            self.give_back(number)


def machine_slots(journal_dir: Path, limit: int) -> MachineSlots:
    """The slots of the run whose journal is `journal_dir`, on this machine."""
    return MachineSlots(machine_folder(journal_dir, "slots"), limit)
