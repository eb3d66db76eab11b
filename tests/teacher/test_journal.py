"""The journal: torn lines, concurrent writers in two processes, claims."""

import multiprocessing
import os
import subprocess
import sys
import time

import orjson
import pytest

from skillsft.pipeline.teacher.journal import Journal, JournalRecord, request_key
from skillsft.testing.process import server_stats, start_server_process
from tests.support.fixtures import REPO_ROOT


def record(key: str, text: str = "{}") -> JournalRecord:
    return JournalRecord(key=key, kind="response", raw_text=text, finish_reason="stop")


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_clean(tmp_path):
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.append(record("a"))
    with open(path, "ab") as handle:
        handle.write(orjson.dumps(record("b").model_dump())[:25])  # crash mid-write

    reread = Journal(path)
    assert reread.latest_response("a") is not None and reread.latest_response("b") is None
    reread.append(record("c"))

    final = Journal(path)
    assert final.latest_response("c") is not None
    assert final.skipped_lines == 1  # the torn fragment, now on its own line


def test_errors_are_kept_but_never_returned_as_responses(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    journal.append(JournalRecord(key="k", kind="error", error="timeout: no answer"))
    assert Journal(tmp_path / "j.jsonl").latest_response("k") is None


def _write_many(path: str, prefix: str, count: int) -> None:
    journal = Journal(path)  # type: ignore[arg-type]
    for index in range(count):
        journal.append(record(f"{prefix}{index}", "x" * 5000))  # big lines make tearing likely


@pytest.mark.parametrize(("claims", "count"), [("flock", 300), ("lease", 150)])
def test_two_processes_appending_at_once_corrupt_nothing(tmp_path, monkeypatch, claims, count):
    """Both claim modes (lease files are what NFS/Lustre work dirs use); the spawned writers
    inherit the mode through the environment."""
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", claims)
    monkeypatch.setenv("SKILLSFT_LEASE_SECONDS", "0.6")
    path = str(tmp_path / "j.jsonl")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_many, args=(path, p, count)) for p in ("p", "q")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0

    journal = Journal(tmp_path / "j.jsonl")
    assert journal.skipped_lines == 0
    assert len(journal) == 2 * count
    assert all(journal.latest_response(f"{p}{i}") for p in "pq" for i in range(count))
    if claims == "lease":
        assert not list(journal.claims_dir.iterdir())  # every lease was given back


def test_a_claim_is_exclusive_and_dies_with_its_process(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    claim = journal.try_claim("k")
    assert claim is not None
    assert Journal(tmp_path / "j.jsonl").try_claim("k") is None  # another holder
    claim.release()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from pipeline.teacher.journal import Journal; "
            f"c = Journal({str(tmp_path / 'j.jsonl')!r}).try_claim('k'); "
            "print('held' if c else 'busy', flush=True); time.sleep(60)",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    assert journal.try_claim("k") is None
    holder.kill()  # SIGKILL: no cleanup runs
    holder.wait()
    assert journal.try_claim("k") is not None


def test_the_key_covers_everything_that_shapes_the_answer():
    base = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "parameters": {"temperature": 0.3},
        "answer_schema": {"type": "object"},
        "prompt_version": "v1",
    }
    keys = {request_key(**base)}
    for field, value in [
        ("model", "n"),
        ("messages", []),
        ("parameters", {}),
        ("answer_schema", {}),
        ("prompt_version", "v2"),
    ]:
        keys.add(request_key(**{**base, field: value}))
    assert len(keys) == 6


def teacher_run_command(base_url: str, work_dir, count: int, concurrency: int) -> list[str]:
    """One teacher batch in its own process (tests/support/teacher_run.py)."""
    return [sys.executable, "-m", "tests.support.teacher_run", "--base-url", base_url,
            "--work-dir", str(work_dir), "--count", str(count),
            "--concurrency", str(concurrency)]


def test_kill_9_half_way_then_rerun_pays_only_for_what_was_in_flight(tmp_path):
    count, concurrency = 120, 4
    server, base_url = start_server_process("--latency", "0.05")
    command = teacher_run_command(base_url, tmp_path, count, concurrency)
    try:
        run = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while server_stats(base_url)["paid"] < count // 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(run.pid, 9)
        run.wait()
        paid_before = server_stats(base_url)["paid"]
        assert count // 2 <= paid_before < count  # really killed half-way

        rerun = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        outcome = orjson.loads(rerun.stdout.strip().splitlines()[-1])
        stats = server_stats(base_url)
    finally:
        server.kill()
        server.wait()

    assert outcome["ok"] == count and outcome["failed"] == 0
    paid_twice = sum(1 for n in stats["paid_by_prompt"].values() if n > 1)
    assert paid_twice <= concurrency  # only requests in flight at the kill were paid again
    assert stats["paid"] <= count + concurrency + stats["probes"]
    assert stats["probes"] == 1  # the rerun read the learned response mode from the work dir
    assert len(stats["paid_by_prompt"]) == count + 1


def test_two_processes_running_the_same_batch_pay_once_per_request(tmp_path):
    count = 60
    server, base_url = start_server_process("--latency", "0.05")
    command = teacher_run_command(base_url, tmp_path, count, 4)
    try:
        runs = [
            subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outcomes = [orjson.loads(run.communicate(timeout=120)[0].strip()) for run in runs]
        stats = server_stats(base_url)
    finally:
        server.kill()
        server.wait()
    assert all(outcome["ok"] == count for outcome in outcomes)
    # each request called by exactly one of the two processes; one response-mode probe in all
    assert stats["probes"] == 1
    assert stats["paid"] == count + 1
    assert sum(outcome["calls_new"] for outcome in outcomes) == count + 1
