"""Several endpoints serving one model: requests spread, a dead one is taken out, and the
journal does not care which server answered."""

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillsft.cli import build_parser
from skillsft.pipeline.stages.publish.card import public_endpoint
from skillsft.pipeline.teacher.openai.endpoint_pool import check_endpoints
from skillsft.pipeline.teacher.openai.endpoints import (
    full_base_url,
    hand_over,
    redact_url,
    scrub,
    split_urls,
)
from skillsft.pipeline.teacher.openai.preflight import EndpointError
from skillsft.pipeline.teacher.openai.runtime import close_runtimes
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.settings import resolve_teacher
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY
from tests.tasks.test_endpoint_checks import skillsft


@pytest.fixture(autouse=True)
def fresh_process() -> Iterator[None]:
    """Each test starts as a new process: no endpoint taken out, no response mode known."""
    close_runtimes()
    yield
    close_runtimes()


def dead_url() -> str:
    """A local port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def teacher_for(base_url: str, work_dir: Path, **overrides: Any) -> OpenAITeacher:
    explicit: dict[str, Any] = {
        "api_key": TEST_API_KEY, "base_url": base_url, "model": "gpt-4o-mini",
        "concurrency": 4, "timeout": 2.0, "show_progress": False,
    }
    explicit.update(overrides)
    return OpenAITeacher(TeacherSettings.resolve({}, **explicit), work_dir, "toy")


def answers(results: list[Any]) -> dict[str, Any]:
    return {result.request_id: result.answer for result in results}


def test_requests_spread_over_servers_and_a_dead_one_is_taken_out(
    server_factory, tmp_path, caplog
):
    first, second, alone = server_factory(), server_factory(), server_factory()
    dead = dead_url()
    requests = toy_requests(40)
    caplog.set_level(logging.WARNING, logger="skillsft.teacher")

    pooled = teacher_for(",".join([first.base_url, dead, second.base_url]), tmp_path / "pool")
    results, _ = pooled.run_batch(requests, stage="toy")

    assert all(result.ok for result in results), [r.error for r in results if not r.ok]
    assert first.stats.stage_requests > 5 and second.stats.stage_requests > 5
    assert first.stats.stage_requests + second.stats.stage_requests == len(requests)
    assert pooled.runtime.pool.is_out(dead) and not pooled.runtime.pool.is_out(first.base_url)
    taken_out = [r.getMessage() for r in caplog.records if "taken out" in r.getMessage()]
    assert len(taken_out) == 1 and dead in taken_out[0]
    # The same answers as one server gives for the same prompts: no answer went to the wrong
    # request.
    single, _ = teacher_for(alone.base_url, tmp_path / "single").run_batch(requests, stage="toy")
    assert answers(results) == answers(single)


def test_journal_keys_do_not_depend_on_the_endpoint(server_factory, tmp_path):
    first, second, later = server_factory(), server_factory(), server_factory()
    requests = toy_requests(20)
    teacher_for(f"{first.base_url},{second.base_url}", tmp_path).run_batch(requests, stage="toy")
    assert first.stats.stage_requests and second.stats.stage_requests

    rerun, stats = teacher_for(later.base_url, tmp_path).run_batch(requests, stage="toy")

    assert later.stats.total == 0
    assert all(result.from_journal for result in rerun)
    assert stats.calls_new == 0


def test_the_last_endpoint_is_never_taken_out(tmp_path, caplog):
    dead_one, dead_two = dead_url(), dead_url()
    teacher = teacher_for(f"{dead_one},{dead_two}", tmp_path, max_retries=5,
                          response_format="json_schema")
    caplog.set_level(logging.WARNING, logger="skillsft.teacher")

    results, _ = teacher.run_batch(toy_requests(2), stage="toy")

    assert all(result.error and result.error.startswith("connection") for result in results)
    pool = teacher.runtime.pool
    assert pool.is_out(dead_one) != pool.is_out(dead_two)  # exactly one is out
    assert sum("taken out" in r.getMessage() for r in caplog.records) == 1


def test_preflight_takes_a_failing_endpoint_out_and_keeps_the_others(
    server_factory, caplog, tmp_path
):
    alive = server_factory()
    dead = dead_url()
    caplog.set_level(logging.WARNING, logger="skillsft.teacher")
    teacher = teacher_for(f"{dead},{alive.base_url}", tmp_path)

    check, lines = check_endpoints(teacher.runtime.pool, TEST_API_KEY, "gpt-4o-mini")

    assert check.url.startswith("1 of 2 endpoints")
    assert lines == [f"endpoint taken out: {dead}: connection refused; start the server or fix "
                     "the port in --base-url / OPENAI_BASE_URL"]
    assert teacher.runtime.pool.is_out(dead)
    assert not teacher.runtime.pool.is_out(alive.base_url)
    warnings = [r.getMessage() for r in caplog.records if "taken out" in r.getMessage()]
    assert len(warnings) == 1 and "connection refused" in warnings[0]


def test_preflight_with_every_endpoint_failing_is_one_line(tmp_path):
    pool = teacher_for(f"{dead_url()},{dead_url()}", tmp_path).runtime.pool
    with pytest.raises(EndpointError) as raised:
        check_endpoints(pool, TEST_API_KEY, "gpt-4o-mini")
    message = str(raised.value)
    assert message.startswith("none of the 2 endpoints can be used") and "\n" not in message


def test_a_list_of_urls_keeps_every_credential_hidden():
    urls = ("https://alice:s3cret-one@node1:8000/v1,"
            "https://node2:8000/v1?api-key=s3cret-two,x&region=eu")
    assert split_urls(urls) == ["https://alice:s3cret-one@node1:8000/v1",
                                "https://node2:8000/v1?api-key=s3cret-two,x&region=eu"]
    shown = redact_url(urls)
    assert "s3cret" not in shown and "alice" not in shown and "node2:8000" in shown
    assert "s3cret" not in public_endpoint(urls) and "alice" not in public_endpoint(urls)
    assert "s3cret" not in scrub(f"failed: {urls} said s3cret-two,x", urls)
    environ: dict[str, str] = {}
    digest = hand_over(urls, environ)
    assert digest and full_base_url(shown, digest, environ) == urls


def test_repeated_base_url_flags_make_one_list():
    args = build_parser().parse_args(["check", "alfworld", "--teacher", "openai",
                                      "--base-url", "http://a:1/v1", "--base-url",
                                      "http://b:2/v1"])
    plan = resolve_teacher(args, {"OPENAI_API_KEY": TEST_API_KEY})
    assert plan.settings.base_url == "http://a:1/v1,http://b:2/v1"
    assert plan.base_url_digest == ""  # no credentials: the shown list is the full one


def test_check_command_names_the_endpoint_it_takes_out(server_factory, tmp_path):
    alive, dead = server_factory(), dead_url()
    result = skillsft("check", "search", "--teacher", "openai", "--base-url", alive.base_url,
                      "--base-url", dead, "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    taken_out = [line for line in result.stdout.splitlines() if "taken out" in line]
    assert len(taken_out) == 1 and dead in taken_out[0], result.stdout
    assert "1 of 2 endpoints" in result.stdout and "Traceback" not in result.stderr
