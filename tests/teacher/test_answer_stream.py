"""Streaming requests through the openai teacher (base.answer_stream, openai/stream.py) over real
HTTP to the local test server: a bounded window, results in request order, one call per
distinct request, and the stats a batch of the same requests gets."""

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skillsft.pipeline.teacher.base import TeacherRequest, answer_stream
from skillsft.pipeline.teacher.openai.runtime import close_runtimes
from skillsft.pipeline.teacher.openai.stream import AHEAD_PER_SLOT
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import FakeOpenAIServer, is_probe
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY

CONCURRENCY = 4


def teacher_for(server: FakeOpenAIServer, work_dir: Path) -> OpenAITeacher:
    close_runtimes()  # as in a new process: only the work dir remembers
    settings = TeacherSettings.resolve(
        {}, api_key=TEST_API_KEY, base_url=server.base_url, model="gpt-4o-mini",
        concurrency=CONCURRENCY, max_concurrency=CONCURRENCY, timeout=5.0,
        show_progress=False)
    return OpenAITeacher(settings, work_dir, "toy")


class Counted:
    """The requests of a stage, built one at a time as the teacher pulls them; records how
    many were built and not yet answered to the consumer, at its largest."""

    def __init__(self, requests: list[TeacherRequest[Any]]) -> None:
        self.requests = requests
        self.built = 0
        self.received = 0
        self.most_ahead = 0

    def __iter__(self) -> Iterator[TeacherRequest[Any]]:
        for request in self.requests:
            self.built += 1
            self.most_ahead = max(self.most_ahead, self.built - self.received)
            yield request


def test_a_stream_holds_a_bounded_window_and_costs_what_its_batch_costs(server_factory,
                                                                       tmp_path):
    server = server_factory(latency=0.02)
    distinct = toy_requests(150)
    # a duplicate beside its first copy (in the window) and copies far behind (out of it)
    requests = [*distinct[:100], distinct[99], *distinct[100:], *distinct[:30]]
    counted = Counted(requests)
    teacher = teacher_for(server, tmp_path / "stream")

    stream = answer_stream(teacher, counted, stage="toy")
    results = []
    for result in stream:
        counted.received += 1
        results.append(result)

    bound = AHEAD_PER_SLOT * CONCURRENCY
    assert CONCURRENCY < counted.most_ahead <= bound  # it looks ahead, and no further
    assert teacher.peak_held <= bound
    assert 1 < teacher.peak_in_flight <= CONCURRENCY
    assert [r.request_id for r in results] == [r.request_id for r in requests]
    assert all(r.ok for r in results)
    assert server.stats.total - server.stats.probes == len(distinct)  # one call per prompt
    calls = server.stats.total  # the probe's call included, as the stats count it

    batch_results, batch_stats = teacher_for(server, tmp_path / "batch").run_batch(
        requests, stage="toy")
    assert [r.answer for r in results] == [r.answer for r in batch_results]
    assert [r.from_journal for r in results] == [r.from_journal for r in batch_results]
    counted_fields = ("calls_new", "calls_from_journal", "calls_failed", "prompt_tokens",
                      "completion_tokens", "reused_prompt_tokens")
    assert ({f: getattr(stream.stats, f) for f in counted_fields}
            == {f: getattr(batch_stats, f) for f in counted_fields})
    assert stream.stats.calls_new == calls and stream.stats.calls_from_journal == 0


def test_results_come_in_request_order_when_the_server_answers_out_of_order(server_factory,
                                                                           tmp_path):
    answered: list[int] = []
    lock = threading.Lock()

    def slow_evens(body: dict[str, Any]) -> str:
        if is_probe(body):
            return json.dumps({"probe_ok": True})
        number = int(re.search(r"Item number (\d+)", body["messages"][-1]["content"]).group(1))
        time.sleep(0.2 if number % 2 == 0 else 0.0)
        with lock:
            answered.append(number)
        return json.dumps({"summary": f"item {number}", "steps": ["look"], "score": number})

    server = server_factory(responder=slow_evens)
    requests = toy_requests(24)
    results = list(answer_stream(teacher_for(server, tmp_path), requests, stage="toy"))

    assert answered != sorted(answered)  # the server did answer out of order
    assert [r.request_id for r in results] == [r.request_id for r in requests]
    assert [r.answer.score for r in results] == list(range(24))  # each its own answer


def test_the_first_requests_are_sent_while_the_first_window_is_still_built(server_factory,
                                                                          tmp_path):
    """The window is filled on the event loop; it gives the loop turns as it fills, so the
    server has the stream's first requests before the last of the first window is built."""
    server = server_factory(latency=0.05)
    teacher = teacher_for(server, tmp_path)
    teacher.run_batch(toy_requests(CONCURRENCY, "warm"), stage="toy")  # probe, connections
    before = server.stats.stage_requests
    first_window = AHEAD_PER_SLOT * CONCURRENCY
    received_as_built: list[int] = []

    def built() -> Iterator[TeacherRequest[Any]]:
        for number, request in enumerate(toy_requests(2 * first_window)):
            time.sleep(0.002)  # building takes a while; the server's threads run meanwhile
            if number == first_window - 1:
                # The last of the first window: a request sent during an earlier turn of the
                # loop reaches the server while this one is built, however busy the machine;
                # one never sent (no turn given) never does.
                deadline = time.monotonic() + 5.0
                while server.stats.stage_requests == before and time.monotonic() < deadline:
                    time.sleep(0.005)
            received_as_built.append(server.stats.stage_requests - before)
            yield request

    results = list(answer_stream(teacher, built(), stage="toy"))

    assert all(r.ok for r in results)
    assert received_as_built[first_window - 1] > 0, received_as_built[:first_window]


def test_a_consumer_that_fails_between_results_leaves_no_call_holding_its_claim(server_factory,
                                                                                tmp_path):
    """A stage that fails while its stream still has calls in flight (a full disk while it
    writes) must give their claims back at once: with the garbage collector off, nothing else
    would ever stop them, and another process waiting on those keys would wait for good."""
    import gc

    server = server_factory(latency=0.05)
    requests = toy_requests(60)
    teacher = teacher_for(server, tmp_path / "work")
    keys = [teacher.key_for(r.messages, r) for r in requests]
    gc.disable()
    try:
        consumed = 0
        try:
            with answer_stream(teacher, iter(requests), stage="toy") as stream:
                for _ in stream:
                    consumed += 1
                    if consumed == 5:
                        raise OSError(28, "No space left on device")
        except OSError:
            pass
        claims = [teacher.journal.try_claim(key) for key in keys]
        held = [key for key, claim in zip(keys, claims, strict=True) if claim is None]
        for claim in claims:
            if claim is not None:
                claim.release()
    finally:
        gc.enable()
    assert consumed == 5
    assert held == []  # every call still in flight when the stage failed gave its claim back
    assert teacher.peak_in_flight >= 1  # the stream's close ran (it sets the figures)
