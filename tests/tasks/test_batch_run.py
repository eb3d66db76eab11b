"""`skillsft run --batch` end to end through Luigi and the local server's Batch API."""

import os
import signal
from pathlib import Path

import pytest

from skillsft.tasks.targets import iter_manifests
from skillsft.testing.stage_responder import stage_responder
from tests.tasks.test_e2e_server import assert_no_key_under, corpus, finish, skillsft


def usage_by_stage(work: Path) -> dict[str, dict]:
    return {u["stage"]: u for _, m in iter_manifests(work) for u in m.get("teacher", [])}


def test_batch_run_makes_the_live_corpus_at_half_the_cost_without_live_calls(
        tmp_path: Path, server_factory) -> None:
    live_server = server_factory(responder=stage_responder)
    reference = tmp_path / "live"
    finish(skillsft("alfworld", reference, live_server.base_url))
    live_requests = live_server.stats.stage_requests

    server = server_factory(responder=stage_responder)
    work = tmp_path / "batch"
    output = finish(skillsft("alfworld", work, server.base_url, "--batch", "--batch-wait",
                             "--batch-poll", "0.01"))

    assert corpus(work, "alfworld") == corpus(reference, "alfworld")
    assert server.stats.stage_requests == 0 and server.stats.batch_items == live_requests
    live_usage, batch_usage = usage_by_stage(reference), usage_by_stage(work)
    for stage in ("memories", "aggregate", "distill"):
        assert batch_usage[stage]["calls_new"] == live_usage[stage]["calls_new"] > 0
        assert batch_usage[stage]["cost_usd"] * 2 == pytest.approx(live_usage[stage]["cost_usd"])
    assert "[batch]" in output
    assert_no_key_under(work)


def test_without_wait_each_run_exits_0_waiting_until_the_batches_are_collected(
        tmp_path: Path, server_factory) -> None:
    live_server = server_factory(responder=stage_responder)
    reference = tmp_path / "live"
    finish(skillsft("webshop", reference, live_server.base_url))

    server = server_factory(responder=stage_responder, batch_polls=2)
    work = tmp_path / "batch"
    outputs = []
    while not (work / "webshop_sft_data.json").exists():
        assert len(outputs) < 12, outputs[-1]
        outputs.append(finish(skillsft("webshop", work, server.base_url,
                                       "--batch", "memories,distill")))
    waiting = [o for o in outputs if "is waiting for its batches" in o]
    assert waiting and all("re-run the same command" in o for o in waiting)
    assert "memories is waiting" in outputs[0]
    assert corpus(work, "webshop") == corpus(reference, "webshop")
    # aggregate (not named) went live; memories and distill only through batches, each once
    aggregate_calls = usage_by_stage(work)["aggregate"]["calls_new"]
    assert server.stats.stage_requests == aggregate_calls > 0
    # one probe (the pre-flight's) settled the response mode of the batch items and live calls
    assert server.stats.probes == 1
    assert set(server.stats.paid_by_prompt.values()) == {1}
    assert len(server.batches.batches) == 2


def test_run_killed_right_after_submitting_resumes_without_paying_twice(
        tmp_path: Path, server_factory) -> None:
    live_server = server_factory(responder=stage_responder)
    reference = tmp_path / "live"
    finish(skillsft("search", reference, live_server.base_url))

    running: list = []

    def kill_run(batch_id: str) -> None:
        if batch_id == "batch_00002":  # aggregation's batch: memories are already collected
            os.killpg(running[0].pid, signal.SIGKILL)
            running[0].wait(timeout=60)

    server = server_factory(responder=stage_responder, on_batch_created=kill_run)
    work = tmp_path / "batch"
    running.append(skillsft("search", work, server.base_url, "--batch", "--batch-wait",
                            "--batch-poll", "0.01"))
    running[0].communicate(timeout=600)
    assert running[0].returncode == -signal.SIGKILL

    output = finish(skillsft("search", work, server.base_url, "--batch", "--batch-wait",
                             "--batch-poll", "0.01"))

    assert "stopped before recording it" in output
    assert corpus(work, "search") == corpus(reference, "search")
    assert set(server.stats.paid_by_prompt.values()) == {1} and server.stats.stage_requests == 0
    assert [b["status"] for b in server.batches.batches.values()] == ["completed"] * 3


def test_two_runs_sharing_a_work_dir_under_leases_pay_each_item_once(
        tmp_path: Path, server_factory, scheduler_url, monkeypatch) -> None:
    """Two `run --batch` processes on one work dir through one luigid, every lock a lease (as
    on NFS/Lustre): the run lock is shared, each batch is submitted once, nothing goes live."""
    live_server = server_factory(responder=stage_responder)
    reference = tmp_path / "live"
    finish(skillsft("webshop", reference, live_server.base_url))

    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "lease")
    server = server_factory(responder=stage_responder, batch_polls=3)
    work = tmp_path / "shared"
    runs = [skillsft("webshop", work, server.base_url, "--batch", "--batch-wait",
                     "--batch-poll", "0.05", "--scheduler-url", scheduler_url)
            for _ in range(2)]
    for run in runs:
        finish(run)

    assert corpus(work, "webshop") == corpus(reference, "webshop")
    assert server.stats.batch_items == live_server.stats.stage_requests
    assert set(server.stats.paid_by_prompt.values()) == {1} and server.stats.stage_requests == 0
    assert not list(work.rglob("*.lock")), "a lock bypassed the lease claims"
    assert list(work.rglob("*.lease")) == []  # every lease was given back
