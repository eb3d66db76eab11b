"""The rate-limit machinery: the adaptive limit (halving on 429s, growing while the server keeps
up), the pool-wide pause for a Retry-After or a spent x-ratelimit budget, and the per-minute
caps. Each test fails when its
piece is removed (checked by removing it)."""

import asyncio
import time
from pathlib import Path
from typing import Any

from skillsft.pipeline.teacher.openai.ratelimit_headers import parse_reset
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.pace import MachineWindow
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import FakeOpenAIServer
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY


def teacher_for(server: FakeOpenAIServer, work_dir: Path, **overrides: Any) -> OpenAITeacher:
    settings = TeacherSettings.resolve({}, **{
        "teacher": "openai", "api_key": TEST_API_KEY, "base_url": server.base_url,
        "model": "gpt-4o-mini", "timeout": 10.0, "show_progress": False,
        "response_format": "json_schema", **overrides})  # forced: no probe among the arrivals
    return OpenAITeacher(settings, work_dir, "toy")


def test_429s_bring_the_limit_down_to_what_the_server_takes(server_factory, tmp_path: Path):
    server = server_factory(latency=0.1, max_in_flight=4, retry_after=0.01)
    teacher = teacher_for(server, tmp_path, concurrency=32, max_concurrency=32, max_retries=8)

    results, _ = teacher.run_batch(toy_requests(100), stage="toy")

    assert all(r.ok for r in results)  # no request lost to the 429s
    assert server.stats.faults["over_capacity"] > 0
    assert teacher.final_limit <= 12, teacher.final_limit  # from 32, near the server's 4


def test_the_limit_grows_above_concurrency_while_the_server_keeps_up(
    server_factory, tmp_path: Path
) -> None:
    server = server_factory(latency=0.05)
    teacher = teacher_for(server, tmp_path, concurrency=2, max_concurrency=8)

    teacher.run_batch(toy_requests(150), stage="toy")

    assert 2 < server.stats.peak_in_flight <= 8
    assert teacher.final_limit == 8


def test_a_retry_after_pauses_the_whole_pool(server_factory, tmp_path: Path):
    """The first request meets a 429 with Retry-After 1 s: no request of the batch may reach
    the server before that second has passed (the client's own retries are off, so only the
    pool-wide pause can hold them)."""
    server = server_factory(rate_limit_first=1, retry_after=1.0)
    teacher = teacher_for(server, tmp_path, concurrency=1, max_retries=0)

    results, _ = teacher.run_batch(toy_requests(3), stage="toy")

    assert all(r.ok for r in results)
    (refused_at, status), *later = server.stats.arrivals
    assert status == 429 and later
    assert later[0][0] - refused_at >= 0.95, "a request started during the Retry-After pause"


def test_a_spent_request_budget_holds_new_starts_until_its_reset(server_factory, tmp_path):
    """The first answer says `x-ratelimit-remaining-requests: 0`, reset in 1 s: the next request
    must not reach the server before then."""
    server = server_factory(budget_spent_first=1)
    teacher = teacher_for(server, tmp_path, concurrency=1, max_retries=0)

    results, _ = teacher.run_batch(toy_requests(3), stage="toy")

    assert all(r.ok for r in results)
    (first, _), (second, _), *_ = server.stats.arrivals
    assert second - first >= 0.95, "a request started although the budget was spent"


def test_reset_durations_in_the_forms_servers_send() -> None:
    assert parse_reset("1s") == 1.0 and parse_reset("6m0s") == 360.0
    assert parse_reset("20ms") == 0.02 and parse_reset("1m30.5s") == 90.5
    assert parse_reset("2.5") == 2.5 and parse_reset("soon") is None


def starts_with_cap(window: MachineWindow, amounts: list[int]) -> list[float]:
    """When each `take` returned, for a cap over a short window (the same code as per minute)."""

    async def take_all() -> list[float]:
        started = []
        for amount in amounts:
            await window.take(amount)
            started.append(time.monotonic())
        return started

    return asyncio.run(take_all())


def test_the_requests_per_window_cap_holds_back_the_excess(tmp_path: Path) -> None:
    starts = starts_with_cap(MachineWindow(tmp_path / "rpm", 3, window_s=0.5), [1] * 5)
    assert starts[2] - starts[0] < 0.4  # three go at once
    assert starts[3] - starts[0] >= 0.45  # the fourth waits for the window to move on


def test_the_tokens_per_window_cap_counts_amounts(tmp_path: Path) -> None:
    starts = starts_with_cap(MachineWindow(tmp_path / "tpm", 100, window_s=0.5), [60, 30, 20])
    assert starts[1] - starts[0] < 0.4  # 90 fit
    assert starts[2] - starts[0] >= 0.45  # 110 do not
