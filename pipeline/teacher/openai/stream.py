"""A stream of requests answered on the runtime's event loop: in request order, a bounded window.

`OpenAITeacher.stream_batch` (teacher.py) drives a `RequestWindow` from the stage's thread, one
`next_ready` at a time, while the answers run on the runtime's loop in its own thread
(runtime.py). Each step first tops the window up: requests are pulled from the stage's iterable
(which builds them as it goes, on the stage's thread) until `ahead` of them are held, each one
handed to the loop as it is built, so the concurrency limit, not the window, decides how many
are in flight; `ahead` is a few times the concurrency ceiling, so the limit stays busy while
the head of the line waits. Then it waits for the oldest request and hands back every result
at the front that is ready, in request order. While the stage builds requests or uses the
results, the loop goes on reading answers, giving back slots and sending the requests held.
Nothing else is held: a stage that consumes the results as they come holds at most `ahead`
requests and their results.

Identical rendered requests share one call while both are in the window (one task per journal
key). A later duplicate is asked again and finds the answer in the journal; it is counted as
its first copy was (paid in this run, not reused), so the stats are those of one whole batch.
A failure met in this stream is handed to a later duplicate as it is, never asked again.

The window's own bookkeeping (order, sharing, the counts) is the stage thread's; the tasks and
the tracker (progress.py) are the loop's: results reach the tracker through the loop.
"""

import asyncio
import concurrent.futures
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any

from skillsft.pipeline.teacher.base import TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.openai.runtime import TeacherRuntime
from skillsft.pipeline.teacher.progress import BatchTracker

# Requests held ahead of the results consumed, per slot of the concurrency ceiling.
AHEAD_PER_SLOT = 4

# Requests handed to the loop at once: each hand-over wakes the loop's thread (and contends
# for the GIL), so one per request costs more CPU than it saves. The window is topped up when
# it has room for this many, and the loop has requests queued for slots meanwhile, so waiting
# for a few more to be built delays none but the stream's first ones.
HAND_OVER = 8

Answer = Callable[[TeacherRequest[Any], str], Awaitable[TeacherResult[Any]]]


class RequestWindow:
    def __init__(self, requests: Iterator[TeacherRequest[Any]],
                 key_of: Callable[[TeacherRequest[Any]], str], answer: Answer,
                 tracker: BatchTracker, ahead: int, runtime: TeacherRuntime) -> None:
        self.requests = requests
        self.key_of = key_of
        self.answer = answer
        self.tracker = tracker
        self.ahead = max(1, ahead)
        self.runtime = runtime
        self.loop = runtime.loop
        self.exhausted = False
        self.order: deque[tuple[str, TeacherRequest[Any]]] = deque()  # held, in request order
        self.answers: dict[str, concurrent.futures.Future[TeacherResult[Any]]] = {}  # by key
        self.running: set[asyncio.Task[Any]] = set()  # the loop's: answers still running
        self.holders: Counter[str] = Counter()  # key -> requests in the window that share it
        self.paid_here: set[str] = set()  # keys answered by a new call in this stream
        self.failed_here: dict[str, TeacherResult[Any]] = {}
        self.finished: list[TeacherResult[Any]] = []  # used, not yet told to the tracker
        self.built = 0  # requests pulled from the iterable
        self.peak_held = 0  # most requests held at once (tests, benchmarks)

    def _fill(self) -> None:
        """Top the window up to `ahead`, once it has room for a hand-over (or is empty)."""
        if self.exhausted or len(self.order) > self.ahead - min(HAND_OVER, self.ahead):
            return
        handing: dict[str, TeacherRequest[Any]] = {}  # new answers not yet handed over
        while len(self.order) < self.ahead:
            try:
                request = next(self.requests)
            except StopIteration:
                self.exhausted = True
                break
            key = self.key_of(request)
            if key not in self.answers and key not in handing:
                earlier = self.failed_here.get(key)
                if earlier is not None:
                    done: concurrent.futures.Future[TeacherResult[Any]] = (
                        concurrent.futures.Future())
                    done.set_result(earlier)
                    self.answers[key] = done
                else:
                    handing[key] = request
                    if len(handing) == HAND_OVER:  # the loop works on these meanwhile
                        self._tell_loop(handing)
                        handing = {}
            self.holders[key] += 1
            self.order.append((key, request))
            self.built += 1
        self.peak_held = max(self.peak_held, len(self.order))
        self._tell_loop(handing)

    def _tell_loop(self, handing: dict[str, TeacherRequest[Any]]) -> None:
        """One hand-over to the loop: the new answers to start, and the tracker's news."""
        works = [self.answer(request, key) for key, request in handing.items()]
        futures = self.runtime.submit(works, self.running, then=self._tracker_news())
        for key, future in zip(handing, futures, strict=True):
            self.answers[key] = future

    def _tracker_news(self) -> Callable[[], None]:
        """What the tracker has not been told yet, to tell it on the loop: the results used
        since, and the requests built so far (the bar's total)."""
        finished, self.finished = self.finished, []
        tracker, built = self.tracker, self.built

        def tell() -> None:
            tracker.expect(built)
            for result in finished:
                tracker.finished(result)

        return tell

    def next_ready(self) -> list[TeacherResult[Any]]:
        """The next results in request order (at least one), or [] once the stream is done;
        waits (in this thread) for the oldest request held."""
        self._fill()
        if not self.order:
            return []
        self.answers[self.order[0][0]].result()
        ready = []
        while self.order and self.answers[self.order[0][0]].done():
            key, request = self.order.popleft()
            result = replace(self.answers[key].result(), request_id=request.request_id)
            if not result.ok:
                self.failed_here[key] = result
            elif not result.from_journal:
                self.paid_here.add(key)
            elif key in self.paid_here:  # a later duplicate of an answer paid in this stream
                result = replace(result, from_journal=False)
            self.holders[key] -= 1
            if not self.holders[key]:
                del self.holders[key], self.answers[key]
            ready.append(result)
        self.finished.extend(ready)
        if self.exhausted:  # no hand-over to carry them any more
            self._tell_loop({})
        return ready

    async def close(self) -> None:
        """Stop what is still running (a consumer that gave up, or a failure): a call in flight
        is abandoned like one a kill stops, and its answer, if journaled, is kept. Run on the
        loop (`runtime.run`), after every answer this window handed over has started."""
        self._tracker_news()()  # on the loop now
        for task in self.running:
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
        self.answers.clear()

