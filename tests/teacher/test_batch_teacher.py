"""The Batch API teacher against the local server's /v1/files and /v1/batches, over HTTP."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.teacher.batch.ledger import BatchLedger, LedgerEvent, ledger_path
from skillsft.pipeline.teacher.batch.teacher import (
    BatchApiError,
    BatchesPending,
    BatchOptions,
    BatchTeacher,
)
from skillsft.pipeline.teacher.factory import make_teacher
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import FakeOpenAIServer
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import REPO_ROOT, TEST_API_KEY


def settings_for(server: FakeOpenAIServer, **overrides: Any) -> TeacherSettings:
    explicit: dict[str, Any] = {"api_key": TEST_API_KEY, "base_url": server.base_url,
                                "model": "gpt-4o-mini", "timeout": 5.0, "show_progress": False,
                                # forced, so no probe goes live: batch items are asked in the
                                # mode given, like live requests (test_batch_body.py has the
                                # negotiated modes)
                                "response_format": "json_schema"}
    return TeacherSettings.resolve({}, **{**explicit, **overrides})


def batch_teacher(server: FakeOpenAIServer, work: Path, *, wait: bool = True,
                  **overrides: Any) -> BatchTeacher:
    return BatchTeacher(settings_for(server, **overrides), work, "toy",
                        BatchOptions(wait=wait, poll_seconds=0.01))


def answers(results: list[Any]) -> list[Any]:
    return [r.answer.model_dump() if r.ok else r.error for r in results]


def test_batch_answers_equal_live_answers_at_half_the_price(server_factory, tmp_path):
    # Answers depend on the prompt: a mixed-up custom_id would give an item another's answer.
    def echo(body: dict[str, Any]) -> str:
        item = body["messages"][-1]["content"]
        return json.dumps({"summary": item, "steps": [item[::-1]], "score": len(item)})

    server = server_factory(responder=echo)
    requests = toy_requests(40)
    live_results, live_stats = OpenAITeacher(settings_for(server), tmp_path / "live",
                                             "toy").run_batch(requests, stage="toy")
    live_calls = server.stats.total
    teacher = batch_teacher(server, tmp_path / "batch")

    results, stats = teacher.run_batch(requests, stage="toy")

    assert answers(results) == answers(live_results)
    assert [r.request_id for r in results] == [r.request_id for r in requests]
    assert server.stats.total == live_calls  # not one live call in batch mode
    assert teacher.batches_submitted == 1 and server.stats.batch_items == 40
    assert stats.calls_new == 40 and stats.prompt_tokens == live_stats.prompt_tokens
    assert stats.cost_usd == pytest.approx(live_stats.cost_usd / 2)


def test_without_wait_the_stage_waits_and_a_rerun_collects_without_resubmitting(
        server_factory, tmp_path):
    server = server_factory(batch_polls=2)
    requests = toy_requests(10)
    with pytest.raises(BatchesPending, match="re-run the same command") as pending:
        batch_teacher(server, tmp_path, wait=False).run_batch(requests, stage="toy")
    assert pending.value.batch_ids == ["batch_00001"]
    # The factory sends a stage with open batches to the batch teacher even without --batch.
    again = make_teacher(settings_for(server), tmp_path, "toy")
    assert isinstance(again, BatchTeacher)
    with pytest.raises(BatchesPending):
        again.run_batch(requests, stage="toy")  # second poll: still in progress

    results, stats = make_teacher(settings_for(server), tmp_path, "toy").run_batch(
        requests, stage="toy")

    assert all(r.ok for r in results) and stats.calls_new == 10
    assert len(server.batches.batches) == 1 and server.stats.total == 0
    assert max(server.stats.paid_by_prompt.values()) == 1
    # collected: a fourth run answers from the journal and goes live again for new work
    assert isinstance(make_teacher(settings_for(server), tmp_path, "toy"), OpenAITeacher)


def test_failed_items_go_to_the_next_batch_and_invalid_answers_are_reasked(
        server_factory, tmp_path):
    server = server_factory(p_server_error=0.2, p_malformed=0.15, seed=3)
    requests = toy_requests(60)
    teacher = batch_teacher(server, tmp_path)

    results, stats = teacher.run_batch(requests, stage="toy")

    assert server.stats.faults["server_error"] > 0 and server.stats.faults["malformed"] > 0
    failed = [r.error for r in results if not r.ok]
    assert len(failed) <= 3 and all("(after 3 answers)" in e for e in failed), failed
    assert stats.calls_failed == len(failed)
    assert teacher.batches_submitted >= 2 and server.stats.total == 0
    # a re-ask is a new conversation (the bad reply quoted), sent in the next round
    reasks = [b for b in _batch_bodies(server) if len(b["messages"]) > 2]
    assert reasks and all("could not be used" in b["messages"][-1]["content"] for b in reasks)
    ledger = BatchLedger(ledger_path(tmp_path, "toy"))
    assert not ledger.open_submissions() and ledger.failures


def test_expired_and_cancelled_batches_are_resubmitted_up_to_the_retry_limit(
        server_factory, tmp_path):
    server = server_factory(expire_batches=1)
    requests = toy_requests(30)
    results, _ = batch_teacher(server, tmp_path).run_batch(requests, stage="toy")
    expired = server.batches.batches["batch_00001"]
    assert expired["status"] == "expired" and 0 < expired["request_counts"]["failed"] < 30
    assert all(r.ok for r in results) and len(server.batches.batches) == 2
    assert server.batches.batches["batch_00002"]["request_counts"]["total"] == (
        expired["request_counts"]["failed"])

    # A batch someone cancels (the provider's dashboard) is retried; with max_retries=0 not.
    server2 = server_factory(batch_polls=2)
    teacher = batch_teacher(server2, tmp_path / "cancel", wait=False, max_retries=0)
    with pytest.raises(BatchesPending):
        teacher.run_batch(requests[:5], stage="toy")
    server2.batches.handle("POST", "/v1/batches/batch_00001/cancel", {}, b"")
    results, stats = batch_teacher(server2, tmp_path / "cancel", max_retries=0).run_batch(
        requests[:5], stage="toy")
    assert [r.error.split(":")[0] for r in results] == ["missing"] * 5
    assert stats.failures == {"missing": 5} and len(server2.batches.batches) == 1
    # reported failed, their count starts again: a later run retries them, as live would
    results, _ = batch_teacher(server2, tmp_path / "cancel", max_retries=0).run_batch(
        requests[:5], stage="toy")
    assert all(r.ok for r in results) and len(server2.batches.batches) == 2


def test_large_rounds_are_split_into_batches_by_input_file_size(server_factory, tmp_path):
    server = server_factory()
    teacher = BatchTeacher(settings_for(server), tmp_path, "toy",
                           BatchOptions(wait=True, poll_seconds=0.01, max_bytes=3000))
    results, _ = teacher.run_batch(toy_requests(12), stage="toy")
    sizes = [len(server.batches.files[b["input_file_id"]].data)
             for b in server.batches.batches.values()]
    assert all(r.ok for r in results) and len(sizes) >= 3
    assert all(size <= 3000 for size in sizes)
    assert sum(b["request_counts"]["total"] for b in server.batches.batches.values()) == 12


def test_an_endpoint_without_the_batch_api_is_a_one_line_error(openai_server, tmp_path):
    base_url = openai_server.base_url.replace("/v1", "/no-batches/v1")
    teacher = BatchTeacher(settings_for(openai_server, base_url=base_url), tmp_path, "toy",
                           BatchOptions(wait=True, poll_seconds=0.01))
    with pytest.raises(BatchApiError, match="does not offer the Batch API.*without --batch") as err:
        teacher.run_batch(toy_requests(2), stage="toy")
    assert "/no-batches/v1/files" in str(err.value) and TEST_API_KEY not in str(err.value)


def _batch_bodies(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    endpoint = server.batches
    bodies = []
    for batch in endpoint.batches.values():
        data = endpoint.files[batch["input_file_id"]].data
        bodies += [json.loads(line)["body"] for line in data.splitlines()]
    return bodies


def test_kill_9_between_submission_and_journaling_never_pays_twice(server_factory, tmp_path):
    """The client dies after the provider created its batch and before it heard the id: the
    re-run finds the batch by its submission id and collects it instead of submitting again."""
    process: list[subprocess.Popen[str]] = []

    def kill_the_client(batch_id: str) -> None:
        os.kill(process[0].pid, signal.SIGKILL)
        process[0].wait(timeout=30)

    server = server_factory(on_batch_created=kill_the_client)
    process.append(subprocess.Popen(
        [sys.executable, "-m", "tests.support.teacher_run", "--base-url", server.base_url,
         "--work-dir", str(tmp_path), "--count", "25", "--batch"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    process[0].communicate(timeout=120)
    assert process[0].returncode == -signal.SIGKILL
    ledger = BatchLedger(ledger_path(tmp_path, "toy"))
    [unconfirmed] = ledger.open_submissions()
    assert unconfirmed.batch_id is None and len(server.batches.batches) == 1

    server.config.on_batch_created = None
    server.batches.on_batch_created = None
    results, stats = batch_teacher(server, tmp_path).run_batch(toy_requests(25), stage="toy")

    assert all(r.ok for r in results) and stats.calls_new == 25
    assert len(server.batches.batches) == 1  # found and collected, not submitted again
    # the killed run negotiated the response mode (one probe); nothing else went live
    assert set(server.stats.paid_by_prompt.values()) == {1} and server.stats.stage_requests == 0
    assert BatchLedger(ledger_path(tmp_path, "toy")).submissions[
        unconfirmed.submission].batch_id == "batch_00001"


def test_a_crash_before_the_batch_reached_the_provider_submits_it_then(
        server_factory, tmp_path):
    """An intent the provider never saw (the create call did not get through) is abandoned and
    its requests go out in a new batch: nothing is left waiting forever."""
    server = server_factory()
    teacher = batch_teacher(server, tmp_path)
    file_id = teacher.provider.upload([b'{"custom_id": "x"}'])
    teacher.ledger.append(LedgerEvent(event="intent", submission="lost", file_id=file_id,
                                      keys=[teacher.key_for(r.messages, r)
                                            for r in toy_requests(3)]))

    results, _ = teacher.run_batch(toy_requests(3), stage="toy")

    assert all(r.ok for r in results) and len(server.batches.batches) == 1
    assert BatchLedger(ledger_path(tmp_path, "toy")).submissions["lost"].abandoned


def test_batch_and_live_teachers_journal_under_the_same_keys(openai_server, tmp_path):
    """What makes a batch answer reusable by a live run and the other way round."""
    settings = settings_for(openai_server)
    live = OpenAITeacher(settings, tmp_path, "toy")
    batch = BatchTeacher(settings, tmp_path, "toy")
    requests = toy_requests(3)
    assert [batch.key_for(r.messages, r) for r in requests] == [
        live.key_for(r.messages, r) for r in requests]
    live.run_batch(requests, stage="toy")
    results, stats = batch.run_batch(requests, stage="toy")
    assert all(r.ok and r.from_journal for r in results) and stats.calls_new == 0
    assert not openai_server.batches.batches
