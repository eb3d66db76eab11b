"""--rpm and --tpm for a whole machine: one sliding window shared by every process of a run.

Each worker process of a run (Luigi's `--workers`, several commands sharing a `luigid`) would
otherwise keep its own window, and a machine with four workers would send four times the cap.
So the window is a file in the machine-local runtime folder (machine.py): a list of fixed-size
records `(start time, amount)`, read and appended under an exclusive `flock`. A request may
start when the amounts started within the last window, plus its own, fit the cap.

Times are `time.monotonic()`, which on Linux and macOS counts from boot and is the same clock
in every process of the machine. The window is `window_s` long (60 s unless
`SKILLSFT_RATE_WINDOW` says otherwise, teacher/settings.py) and the cap is scaled to it, so
`--rpm 120` with a 10 s window allows 20 starts in any 10 s.

A call is counted from its start until one window after it *ended* (`finish`): the server
counts it when it arrives, somewhere between the two, and a call counted only from its start
could, delayed on its way (a new connection, a busy machine), arrive together with calls
started a window later, more than the cap within one window at the server. Counted until the
end, any calls that arrive within one window of each other were all counted at once, when the
last of them started, so they fit the cap. (A call longer than the window is not counted
between its start's window and its end.) `finish` appends two records: the start's amount
taken back, and the amount used, at the end time. A token reservation is a guess (the prompt
estimate plus --max-output-tokens); `finish` counts what the answer says it used instead, or
the reservation when the answer does not say.
"""

import asyncio
import fcntl
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

RECORD = struct.Struct("<dq")  # start time (monotonic seconds), amount (may be negative)
COMPACT_AFTER = 4096  # records past their window before the file is rewritten without them
MIN_WAIT_S = 0.002


class MachineWindow:
    """At most `cap` units (requests or tokens) started in any `window_s` on this machine."""

    def __init__(self, path: Path, cap: int, *, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.cap = max(1, cap)
        self.window_s = window_s
        self.clock = clock
        self._fd = -1
        self._pid = -1
        self._queue: asyncio.Lock | None = None

    def _descriptor(self) -> int:
        if self._pid != os.getpid():  # a forked child opens its own
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            self._pid = os.getpid()
        return self._fd

    def _try(self, amount: int) -> tuple[float, float | None]:
        """Take `amount` now if it fits: (start time, None); else (now, seconds to wait)."""
        fd = self._descriptor()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            now = self.clock()
            records = list(RECORD.iter_unpack(data[: len(data) // RECORD.size * RECORD.size]))
            live = sorted(r for r in records if now - r[0] < self.window_s)
            used = sum(amount for _, amount in live)
            if used + amount > self.cap and live:
                need, freed = used + amount - self.cap, 0
                for started, units in live:
                    freed += units
                    if freed >= need:
                        return now, max(MIN_WAIT_S, started + self.window_s - now)
                return now, self.window_s
            if len(records) - len(live) > COMPACT_AFTER:
                os.ftruncate(fd, 0)
                os.write(fd, b"".join(RECORD.pack(*record) for record in live))
            os.write(fd, RECORD.pack(now, amount))
            return now, None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    async def take(self, amount: int = 1) -> float:
        """Wait until `amount` fits, take it, and return its start time (for `finish`). One
        amount larger than the cap still goes, alone in its window."""
        amount = min(amount, self.cap)
        if self._queue is None:
            self._queue = asyncio.Lock()
        async with self._queue:  # this process's waiters in order, one polling the file
            while True:
                started, wait = self._try(amount)
                if wait is None:
                    return started
                await asyncio.sleep(wait)

    def finish(self, started: float, reserved: int, used: int | None = None) -> None:
        """The call that took `reserved` at `started` has ended (answered or not); it counts
        `used` (default: the reservation) from now until a window has passed."""
        fd = self._descriptor()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.write(fd, RECORD.pack(started, -reserved) + RECORD.pack(
                self.clock(), reserved if used is None else min(used, self.cap)))
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def used(self) -> int:
        """Units started in the current window, machine-wide (for tests and the curious)."""
        fd = self._descriptor()
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        now = self.clock()
        return sum(a for t, a in RECORD.iter_unpack(data[: len(data) // RECORD.size *
                                                        RECORD.size]) if now - t < self.window_s)


def scaled_cap(per_minute: int, window_s: float) -> int:
    """A per-minute cap over a window of `window_s` seconds."""
    return max(1, round(per_minute * window_s / 60.0))
