"""The journal on trust: short writes, memory bounded by the index, lease claims where flock is
not trusted (forced with SKILLSFT_JOURNAL_CLAIMS=lease, since this machine has flock)."""

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import orjson
import pytest

from skillsft.pipeline.teacher.claims import (
    FlockClaims,
    LeaseClaims,
    claims_for,
    file_system_type,
)
from skillsft.pipeline.teacher.journal import Journal
from skillsft.testing.process import server_stats, start_server_process
from tests.support.fixtures import REPO_ROOT
from tests.teacher.test_journal import record, teacher_run_command


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


def test_a_short_write_is_finished_or_reported_never_silently_cut(tmp_path):
    """RLIMIT_FSIZE makes the kernel write only part of a buffer (a real short write), then
    refuse the rest: the append must fail loudly, and the journal must stay readable."""
    path = tmp_path / "j.jsonl"
    Journal(path).append(record("first"))
    limit = path.stat().st_size + 3000
    child = run_python(
        "import resource, signal\n"
        "from skillsft.pipeline.teacher.journal import Journal, JournalRecord\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))\n"
        f"journal = Journal({str(path)!r})\n"
        "try:\n"
        "    journal.append(JournalRecord(key='big', kind='response', raw_text='x' * 10000))\n"
        "except OSError as exc:\n"
        "    print('failed', exc.errno)\n"
        "else:\n"
        "    print('written')\n"
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.split()[0] == "failed", out
    assert path.stat().st_size == limit  # the kernel really wrote part of the record

    journal = Journal(path)  # the cut record is a torn line: skipped, the rest intact
    assert journal.latest_response("first") is not None
    assert journal.latest_response("big") is None
    journal.append(record("big", "y" * 10000))
    assert Journal(path).latest_response("big").raw_text == "y" * 10000


def test_memory_holds_the_index_not_the_answers(tmp_path):
    path = tmp_path / "j.jsonl"
    answer = "z" * 10_000
    lines = [orjson.dumps(record(f"key{i}", answer).model_dump()) + b"\n" for i in range(2000)]
    path.write_bytes(b"".join(lines))  # 20 MB of answers
    tracemalloc.start()
    journal = Journal(path)
    held, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(journal) == 2000
    assert held < 2_000_000, f"{held} bytes kept for a 20 MB journal"
    assert journal.latest_response("key1999").raw_text == answer


def test_the_newest_answer_of_a_key_wins_across_writers_and_rereads(tmp_path):
    path = tmp_path / "j.jsonl"
    first, second = Journal(path), Journal(path)
    first.append(record("k", "old"))
    second.refresh()
    second.append(record("k", "new"))
    first.refresh()
    assert first.latest_response("k").raw_text == "new"
    assert Journal(path).latest_response("k").raw_text == "new"


def test_the_claim_mode_is_chosen_by_the_variable_or_the_mount(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "lease")
    assert isinstance(claims_for(tmp_path), LeaseClaims)
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "flock")
    assert isinstance(claims_for(tmp_path), FlockClaims)
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "sometimes")
    with pytest.raises(ValueError, match="SKILLSFT_JOURNAL_CLAIMS"):
        claims_for(tmp_path)
    assert file_system_type(Path("/proc/self")) == "proc"


@pytest.fixture
def lease_mode(monkeypatch):
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "lease")
    monkeypatch.setenv("SKILLSFT_LEASE_SECONDS", "0.6")


def hold_claim_in_child(journal_path: Path) -> subprocess.Popen[str]:
    child = run_python(
        "import time\n"
        "from skillsft.pipeline.teacher.journal import Journal\n"
        f"claim = Journal({str(journal_path)!r}).try_claim('k')\n"
        "print('held' if claim else 'busy', flush=True)\n"
        "time.sleep(60)\n"
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_lease_is_exclusive_kept_alive_by_its_heartbeat_and_freed_by_kill_9(
        tmp_path, lease_mode):
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    assert journal.claims.mode == "lease"
    claim = journal.try_claim("k")
    assert claim is not None
    assert Journal(path).try_claim("k") is None
    claim.release()

    holder = hold_claim_in_child(path)
    try:
        deadline = time.monotonic() + 3 * 0.6  # three lifetimes: only the heartbeat keeps it
        while time.monotonic() < deadline:
            assert journal.try_claim("k") is None
            time.sleep(0.05)
    finally:
        holder.kill()  # SIGKILL: no cleanup, the lease file stays behind
        holder.wait()
    assert (journal.claims_dir / "k.lease").exists()
    taken = journal.try_claim("k")  # same host, dead pid: taken over at once
    assert taken is not None
    taken.release()


def test_a_silent_lease_from_another_machine_is_taken_over_after_its_lifetime(
        tmp_path, lease_mode):
    journal = Journal(tmp_path / "j.jsonl")
    stale = journal.claims_dir / "k.lease"
    stale.write_bytes(orjson.dumps({"host": "node-elsewhere", "pid": 1, "token": "t"}))
    started = time.monotonic()
    assert journal.try_claim("k") is None  # first sight: the owner may be alive
    while (claim := journal.try_claim("k")) is None:
        assert time.monotonic() - started < 10
        time.sleep(0.05)
    assert time.monotonic() - started >= 0.6
    assert orjson.loads(stale.read_bytes())["host"] != "node-elsewhere"
    claim.release()
    assert not stale.exists()


def test_two_teacher_processes_with_leases_pay_once_per_request(tmp_path):
    count = 40
    server, base_url = start_server_process("--latency", "0.05")
    command = teacher_run_command(base_url, tmp_path, count, 4)
    env = {**os.environ, "SKILLSFT_JOURNAL_CLAIMS": "lease"}
    try:
        runs = [subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
                                 env=env) for _ in range(2)]
        outcomes = [orjson.loads(run.communicate(timeout=120)[0].strip()) for run in runs]
        stats = server_stats(base_url)
    finally:
        server.kill()
        server.wait()
    assert all(outcome["ok"] == count for outcome in outcomes)
    assert stats["paid"] - stats["probes"] == count  # the response-mode probe is paid once too

