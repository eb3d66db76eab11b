"""A stream of requests answered on the runtime's event loop: in request order, a bounded window.

`OpenAITeacher.stream_batch` (teacher.py) drives a `RequestWindow` from synchronous code, one
`next_ready` at a time. Each step first tops the window up: requests are pulled from the
stage's iterable (which builds them as it goes) until `ahead` of them are held, each one's
answer started as a task at once, so the concurrency limit, not the window, decides how many
are in flight; `ahead` is a few times the concurrency ceiling, so the limit stays busy while
the head of the line waits. The building runs on the event loop, so the fill gives the loop a
turn after every `YIELD_EVERY` requests it starts: the stream's first requests are sent while
the rest of the first window is built, not after it (that cost each stream about `ahead`
requests' building time before its first request went out), and answers that arrive during a
long fill are read before it ends. Then it waits for the oldest request and hands back every
result at the front that is ready, in request order. Nothing else is held: a stage that
consumes the results as they come holds at most `ahead` requests and their results.

Identical rendered requests share one call while both are in the window (one task per journal
key). A later duplicate is asked again and finds the answer in the journal; it is counted as
its first copy was (paid in this run, not reused), so the stats are those of one whole batch.
A failure met in this stream is handed to a later duplicate as it is, never asked again.
"""

import asyncio
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any

from skillsft.pipeline.teacher.base import TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.progress import BatchTracker

# Requests held ahead of the results consumed, per slot of the concurrency ceiling.
AHEAD_PER_SLOT = 4
# Requests started between two turns the fill gives the event loop (see the module doc), and
# the loop's steps in a turn: a call on an open connection reaches the server in its second
# step (measured), so one step (`sleep(0)`) sent nothing. Steps, not a timer: a turn of 1 ms
# tripled the wall time of a stream answered from the journal (a resumed run).
YIELD_EVERY = 8
STEPS_PER_TURN = 3

Answer = Callable[[TeacherRequest[Any], str], Awaitable[TeacherResult[Any]]]


class RequestWindow:
    def __init__(self, requests: Iterator[TeacherRequest[Any]],
                 key_of: Callable[[TeacherRequest[Any]], str], answer: Answer,
                 tracker: BatchTracker, ahead: int) -> None:
        self.requests = requests
        self.key_of = key_of
        self.answer = answer
        self.tracker = tracker
        self.ahead = max(1, ahead)
        self.exhausted = False
        self.order: deque[tuple[str, TeacherRequest[Any]]] = deque()  # held, in request order
        self.tasks: dict[str, asyncio.Future[TeacherResult[Any]]] = {}  # key -> its answer
        self.holders: Counter[str] = Counter()  # key -> requests in the window that share it
        self.paid_here: set[str] = set()  # keys answered by a new call in this stream
        self.failed_here: dict[str, TeacherResult[Any]] = {}
        self.built = 0  # requests pulled from the iterable
        self.peak_held = 0  # most requests held at once (tests, benchmarks)

    async def _fill(self) -> None:
        started = 0
        while not self.exhausted and len(self.order) < self.ahead:
            try:
                request = next(self.requests)
            except StopIteration:
                self.exhausted = True
                break
            key = self.key_of(request)
            if key not in self.tasks:
                earlier = self.failed_here.get(key)
                if earlier is not None:
                    done: asyncio.Future[TeacherResult[Any]] = (
                        asyncio.get_running_loop().create_future())
                    done.set_result(earlier)
                    self.tasks[key] = done
                else:
                    self.tasks[key] = asyncio.ensure_future(self.answer(request, key))
                    started += 1
            self.holders[key] += 1
            self.order.append((key, request))
            self.built += 1
            if started == YIELD_EVERY:
                started = 0
                for _ in range(STEPS_PER_TURN):
                    await asyncio.sleep(0)
        self.peak_held = max(self.peak_held, len(self.order))
        self.tracker.expect(self.built)

    async def next_ready(self) -> list[TeacherResult[Any]]:
        """The next results in request order (at least one), or [] once the stream is done."""
        await self._fill()
        if not self.order:
            return []
        await self.tasks[self.order[0][0]]
        ready = []
        while self.order and self.tasks[self.order[0][0]].done():
            key, request = self.order.popleft()
            result = replace(self.tasks[key].result(), request_id=request.request_id)
            if not result.ok:
                self.failed_here[key] = result
            elif not result.from_journal:
                self.paid_here.add(key)
            elif key in self.paid_here:  # a later duplicate of an answer paid in this stream
                result = replace(result, from_journal=False)
            self.holders[key] -= 1
            if not self.holders[key]:
                del self.holders[key], self.tasks[key]
            self.tracker.finished(result)
            ready.append(result)
        return ready

    async def close(self) -> None:
        """Stop what is still running (a consumer that gave up, or a failure): a call in flight
        is abandoned like one a kill stops, and its answer, if journaled, is kept."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()
