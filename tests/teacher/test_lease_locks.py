"""Every lock is a claim (claims.py), so the lease mode of network file systems covers them all:
the batch ledger, the spend file, the response-mode store and the work dir's run lock. Forced
with SKILLSFT_JOURNAL_CLAIMS=lease (this machine's disk has flock), with real processes."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from skillsft.pipeline.teacher.budget import SpendFile
from skillsft.pipeline.teacher.claims import LeaseClaims, claims_for, try_hold
from skillsft.pipeline.teacher.openai.negotiation import ModeStore
from tests.support.fixtures import REPO_ROOT


@pytest.fixture
def lease_mode(monkeypatch):
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "lease")
    monkeypatch.setenv("SKILLSFT_LEASE_SECONDS", "1")


def python(code: str) -> subprocess.Popen[str]:
    """A child process (it inherits the claim mode from the environment)."""
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def lock_files(folder: Path) -> list[Path]:
    """flock's lock files: in lease mode no lock may leave one behind."""
    return sorted(folder.rglob("*.lock"))


def teacher_run(base_url: str, work: Path, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.teacher_run", "--base-url", base_url,
         "--work-dir", str(work), "--count", str(count), "--batch"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_sharing_a_work_dir_submit_each_batch_once(
        server_factory, tmp_path, lease_mode) -> None:
    count = 30
    # The provider takes its time over the create call while the submitter holds the ledger's
    # submission lease, so the other process is waiting for it then.
    server = server_factory(batch_polls=3, on_batch_created=lambda _: __import__("time").sleep(1))
    runs = [teacher_run(server.base_url, tmp_path, count) for _ in range(2)]
    outcomes = []
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-2000:]
        outcomes.append(orjson.loads(out.strip().splitlines()[-1]))

    assert [o["ok"] for o in outcomes] == [count, count]
    assert len(server.batches.batches) == 1  # one submission, though both processes wanted it
    assert server.stats.batch_items == count and set(server.stats.paid_by_prompt.values()) == {1}
    assert server.stats.stage_requests == 0  # the mode probe only, nothing answered live
    assert sum(o["calls_new"] for o in outcomes) == count  # each answer collected once
    claims = tmp_path / "teacher_toy.batches.jsonl.claims"
    assert claims.is_dir() and not lock_files(tmp_path), lock_files(tmp_path)


def test_a_submitter_killed_while_holding_the_ledger_lease_never_makes_anyone_pay_twice(
        server_factory, tmp_path, lease_mode) -> None:
    """kill -9 right after the provider created the batch: the process dies holding the
    submission lease; the re-run takes the stale lease over (same host, pid gone: at once),
    finds the batch by its submission id and collects it instead of submitting again."""
    running: list[subprocess.Popen[str]] = []

    def kill_the_submitter(batch_id: str) -> None:
        os.kill(running[0].pid, signal.SIGKILL)
        running[0].wait(timeout=30)

    server = server_factory(on_batch_created=kill_the_submitter)
    running.append(teacher_run(server.base_url, tmp_path, 20))
    running[0].communicate(timeout=120)
    assert running[0].returncode == -signal.SIGKILL
    stale = tmp_path / "teacher_toy.batches.jsonl.claims" / "submit.lease"
    assert stale.exists()  # left behind by the dead holder

    server.config.on_batch_created = server.batches.on_batch_created = None
    again = teacher_run(server.base_url, tmp_path, 20)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err[-2000:]
    assert orjson.loads(out.strip().splitlines()[-1])["ok"] == 20
    assert len(server.batches.batches) == 1 and set(server.stats.paid_by_prompt.values()) == {1}
    assert not stale.exists() and not lock_files(tmp_path)


def test_spend_lines_from_several_processes_all_arrive(tmp_path, lease_mode) -> None:
    path = tmp_path / "spend.jsonl"
    code = ("from skillsft.pipeline.teacher.budget import SpendFile\n"
            f"spend = SpendFile({str(path)!r})\n"
            "for _ in range(40):\n"
            "    spend.add('distill', 0.25)\n")
    children = [python(code) for _ in range(3)]
    for child in children:
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    assert SpendFile(path).total() == pytest.approx(3 * 40 * 0.25)
    assert not lock_files(tmp_path)


def test_response_modes_written_by_several_processes_are_all_kept(tmp_path, lease_mode) -> None:
    path = tmp_path / "response_modes.json"
    code = ("import sys\n"
            "from skillsft.pipeline.teacher.openai.negotiation import ModeStore\n"
            f"store = ModeStore({str(path)!r})\n"
            "for i in range(15):\n"
            "    store.put('http://h/v1', f'model-{sys.argv[1]}-{i}', 'json_object')\n")
    children = [subprocess.Popen([sys.executable, "-c", code, str(n)], cwd=REPO_ROOT,
                                 text=True, stderr=subprocess.PIPE) for n in range(3)]
    for child in children:
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    store = ModeStore(path)
    assert all(store.get("http://h/v1", f"model-{n}-{i}") == "json_object"
               for n in range(3) for i in range(15))
    assert not lock_files(tmp_path)


HOLDER = """
import sys, time
from pathlib import Path
from skillsft.pipeline.teacher.claims import claims_for, try_hold
hold = try_hold(claims_for(Path(sys.argv[1])), "run", shared=sys.argv[2] == "shared")
print("held" if hold else "busy", flush=True)
time.sleep(60)
"""


def hold_in_child(folder: Path, how: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), how], cwd=REPO_ROOT,
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line == "held", (line, child.stderr.read() if child.poll() is not None else "")
    return child


@pytest.mark.parametrize("mode", ["flock", "lease"])
def test_run_holds_shared_with_shared_exclusive_with_none_and_die_with_their_holder(
        tmp_path, monkeypatch, mode) -> None:
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", mode)
    claims = claims_for(tmp_path)
    assert isinstance(claims, LeaseClaims) == (mode == "lease")
    sharer = hold_in_child(tmp_path, "shared")
    try:
        assert try_hold(claims, "run") is None  # a live shared holder keeps exclusive out
        second = try_hold(claims, "run", shared=True)
        assert second is not None  # central-scheduler runs share the work dir
        second.release()
    finally:
        sharer.kill()  # SIGKILL: its claim file stays behind
        sharer.wait()
    alone = try_hold(claims, "run")  # the dead holder's claim is taken over at once
    assert alone is not None
    assert try_hold(claims, "run", shared=True) is None
    assert try_hold(claims_for(tmp_path), "run") is None
    alone.release()
    assert not list(tmp_path.iterdir()) or mode == "flock"  # leases are removed on release


def test_a_run_on_a_work_dir_held_under_lease_is_refused_then_runs_once_the_holder_died(
        tmp_path, lease_mode, capsys) -> None:
    from tests.tasks.test_dag import run

    work = tmp_path / "w"
    state = work / ".skillsft"
    state.mkdir(parents=True)
    holder = hold_in_child(state, "exclusive")
    try:
        assert run("--work-dir", str(work)) == 2
        assert "another skillsft run is using" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert (state / "run.lease").exists()
    assert run("--work-dir", str(work)) == 0
    assert not (state / "run.lease").exists() and not lock_files(work)


def test_a_run_lease_from_another_machine_is_watched_live_refused_and_stale_taken_over(
        tmp_path, lease_mode, capsys) -> None:
    """A run lease whose owner is on another machine cannot be judged by its pid: the run
    watches it. Touched (that machine's run is alive, its heartbeat going): refused. Untouched
    for the lease time (SKILLSFT_LEASE_SECONDS=1 here): taken over, and the run goes on."""
    from tests.tasks.test_dag import run

    work = tmp_path / "w"
    state = work / ".skillsft"
    state.mkdir(parents=True)
    lease = state / "run.lease"
    lease.write_bytes(orjson.dumps({"host": "node-elsewhere", "pid": 1, "token": "t"}))
    beating = threading.Event()

    def heartbeat() -> None:
        while not beating.wait(0.2):
            os.utime(lease)

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        assert run("--work-dir", str(work)) == 2
    finally:
        beating.set()
        beat.join()
    assert "another skillsft run is using" in capsys.readouterr().err

    assert run("--work-dir", str(work)) == 0  # nobody touches it now: stale after 1 s
    assert not lease.exists()
