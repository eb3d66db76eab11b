"""One teacher runtime per process (pipeline/teacher/openai/runtime.py): what one batch learns
or builds is where the next batch of the process starts, whichever teacher object asks."""

import logging
from pathlib import Path
from typing import Any

from skillsft.pipeline.teacher.openai.endpoint_pool import OUT_FOR_S
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY


def teacher_for(base_url: str, work_dir: Path, stage: str = "toy", **overrides: Any
                ) -> OpenAITeacher:
    """A new teacher object, as each stage (and the pre-flight) of a process makes one."""
    settings = TeacherSettings.resolve({}, **{
        "teacher": "openai", "api_key": TEST_API_KEY, "base_url": base_url,
        "model": "gpt-4o-mini", "timeout": 5.0, "show_progress": False,
        "response_format": "json_schema", **overrides})
    return OpenAITeacher(settings, work_dir, stage)


def test_the_limit_learned_from_429s_is_where_the_next_batch_starts(server_factory, tmp_path):
    server = server_factory(latency=0.05, max_in_flight=2, retry_after=0.01)
    first = teacher_for(server.base_url, tmp_path, concurrency=16, max_concurrency=16,
                        max_retries=8)
    results, _ = first.run_batch(toy_requests(60), stage="toy")
    assert all(r.ok for r in results) and server.stats.faults["over_capacity"] > 0
    learned = first.final_limit
    assert learned <= 12, learned  # well under the 16 it started at

    server.config.max_in_flight = 0  # the server now takes everything
    server.reset()
    later = teacher_for(server.base_url, tmp_path, stage="other", concurrency=16,
                        max_concurrency=16)
    results, _ = later.run_batch(toy_requests(16, "later"), stage="other")

    assert all(r.ok for r in results)
    # 16 requests at once: a limit starting afresh at --concurrency would send all 16.
    assert server.stats.peak_in_flight <= int(learned) + 2, (server.stats.peak_in_flight, learned)


def test_connections_are_reused_across_batches(server_factory, tmp_path):
    server = server_factory(latency=0.01)
    teacher = teacher_for(server.base_url, tmp_path, concurrency=4, max_concurrency=4)
    teacher.run_batch(toy_requests(20, "one"), stage="toy")
    opened = server.stats.connections
    assert 1 <= opened <= 4

    for version in ("two", "three"):
        other = teacher_for(server.base_url, tmp_path, stage=version, concurrency=4,
                            max_concurrency=4)
        results, _ = other.run_batch(toy_requests(20, version), stage=version)
        assert all(r.ok for r in results)

    assert server.stats.stage_requests == 60
    assert server.stats.connections == opened  # no batch opened a connection of its own


def test_an_endpoint_taken_out_stays_out_then_is_tried_again(server_factory, tmp_path, caplog):
    good = server_factory()
    failing = server_factory(p_server_error=1.0)  # answers every request with a 500
    urls = f"{failing.base_url},{good.base_url}"
    caplog.set_level(logging.INFO, logger="skillsft.teacher")
    first = teacher_for(urls, tmp_path, concurrency=1, max_concurrency=1, max_retries=6)
    results, _ = first.run_batch(toy_requests(12, "one"), stage="toy")
    assert all(r.ok for r in results)
    assert first.runtime.pool.is_out(failing.base_url)
    sent_before = failing.stats.total

    later = teacher_for(urls, tmp_path, stage="later", concurrency=1, max_concurrency=1,
                        max_retries=6)
    results, _ = later.run_batch(toy_requests(12, "later"), stage="later")
    assert all(r.ok for r in results)
    assert failing.stats.total == sent_before  # still out: the next batch sent it nothing
    assert sum("taken out" in r.getMessage() for r in caplog.records) == 1

    pool = later.runtime.pool
    now = pool.clock()
    pool.clock = lambda: now + OUT_FOR_S + 1  # the stated time has passed
    results, _ = later.run_batch(toy_requests(6, "after"), stage="later")
    assert all(r.ok for r in results)
    assert failing.stats.total == sent_before + 1  # one request on trial, then out again
    assert any("trying it again" in r.getMessage() for r in caplog.records)
    assert pool.is_out(failing.base_url)


def test_the_preflight_mode_is_the_stage_mode_without_a_file(server_factory, tmp_path):
    """The pre-flight's negotiated mode reaches the stage's teacher through the runtime: with
    the work dir's mode file gone, the stage still sends no second probe."""
    server = server_factory(refuse_json_schema=True)
    preflight = teacher_for(server.base_url, tmp_path, stage="check", response_format="auto")
    assert preflight.negotiate() == "json_object_schema"
    probes = server.stats.probes
    (tmp_path / "response_modes.json").unlink()

    stage = teacher_for(server.base_url, tmp_path, stage="memory", response_format="auto")
    results, _ = stage.run_batch(toy_requests(5), stage="memory")

    assert all(r.ok for r in results)
    assert server.stats.probes == probes
    assert server.stats.faults["refused_json_schema"] == 1  # the probe's; no stage request


def test_a_forked_worker_inherits_what_the_runtime_learned(server_factory, tmp_path):
    """Luigi runs each task in a forked child when it has several workers: the child makes its
    own clients and loop, but starts with its parent's limit, take-outs and mode."""
    import multiprocessing

    good, failing = server_factory(), server_factory(p_server_error=1.0)
    urls = f"{failing.base_url},{good.base_url}"
    parent = teacher_for(urls, tmp_path, concurrency=1, max_concurrency=8, max_retries=6)
    parent.run_batch(toy_requests(12, "parent"), stage="toy")
    assert parent.runtime.pool.is_out(failing.base_url)
    parent.runtime.limiter.limit = 3.0
    sent_before = failing.stats.total

    inherited = parent.runtime

    def child() -> None:
        runtime = parent.runtime  # looked up again in the child: a new one
        ok = (runtime is not inherited and runtime.pool.is_out(failing.base_url)
              and runtime.limiter.limit == 3.0)
        results, _ = parent.run_batch(toy_requests(4, "child"), stage="toy")
        raise SystemExit(0 if ok and all(r.ok for r in results) else 1)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert failing.stats.total == sent_before  # the child sent the taken-out endpoint nothing
