"""--rpm and --tpm hold for the whole machine (pipeline/teacher/pace.py): two worker processes,
several batches each, together stay under the cap in every window the server sees.

The window is shortened with the real knob (`rate_window`, SKILLSFT_RATE_WINDOW), with the caps
scaled to it, so the test takes seconds: --rpm 300 over a 2 s window is 10 starts per window.
The server counts arrivals, which fall between a call's start and its end; the client counts
a call from its start until a window after its end (pace.py), so the server's windows hold no
more than the cap however long the calls took on their way.
"""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillsft.pipeline.teacher.machine import RuntimeDirError, machine_folder, runtime_root
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.pace import MachineWindow
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import REPO_ROOT, TEST_API_KEY

WINDOW_S = 2.0


def most_in_a_window(events: list[tuple[float, int]], window_s: float) -> int:
    """The largest sum of amounts the server saw within any `window_s`."""
    events = sorted(events)
    best = 0
    for index, (start, _) in enumerate(events):
        best = max(best, sum(a for t, a in events[index:] if t - start < window_s))
    return best


def run_two_workers(base_url: str, work_dir: Path, runtime_dir: Path, count: int,
                    *flags: str) -> None:
    """Two processes, each running 3 batches of `count` new requests, sharing the work dir."""
    env = {**os.environ, "SKILLSFT_RUNTIME_DIR": str(runtime_dir)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.teacher_run", "--base-url", base_url,
             "--work-dir", str(work_dir), "--count", str(count), "--batches", "3",
             "--concurrency", "8", "--rate-window", str(WINDOW_S),
             "--prompt-version", f"worker{number}", *flags],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for number in range(2)
    ]
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-2000:]
        assert f'"ok": {3 * count}' in out, out


def test_rpm_holds_across_two_processes_and_their_batches(server_factory, tmp_path):
    server = server_factory()
    run_two_workers(server.base_url, tmp_path / "work", tmp_path / "runtime", 5, "--rpm", "300")

    starts = [(t, 1) for t, status in server.stats.arrivals]
    assert len(starts) == 30 + server.stats.probes  # the response-mode probe counts too
    # 300 per minute is 10 per 2 s window; each process alone, per batch, would send 5 at once
    # (and a window per process would let 20 through).
    assert most_in_a_window(starts, WINDOW_S) <= 10


def test_tpm_holds_across_two_processes_with_usage_corrections(server_factory, tmp_path):
    server = server_factory()
    # 12000 per minute is 400 per 2 s window. Each toy request reserves its estimate (~10) +
    # 40 output tokens and is billed ~40 (a window per process would let 800 through).
    run_two_workers(server.base_url, tmp_path / "work", tmp_path / "runtime", 4,
                    "--tpm", "12000", "--max-output-tokens", "40")

    assert len(server.stats.billed) == 24 + server.stats.probes
    assert most_in_a_window(server.stats.billed, WINDOW_S) <= 400


def tpm_teacher(base_url: str, work_dir: Path) -> OpenAITeacher:
    settings = TeacherSettings.resolve(
        {}, teacher="openai", api_key=TEST_API_KEY, base_url=base_url, model="gpt-4o-mini",
        show_progress=False, response_format="json_schema", tpm=100_000, max_output_tokens=40)
    return OpenAITeacher(settings, work_dir, "toy")


def test_a_reservation_is_corrected_to_the_reported_usage(server_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLSFT_RUNTIME_DIR", str(tmp_path / "runtime"))
    server = server_factory()
    teacher = tpm_teacher(server.base_url, tmp_path / "work")
    teacher.run_batch(toy_requests(5), stage="toy")
    assert teacher.runtime.tpm is not None
    assert teacher.runtime.tpm.used() == sum(tokens for _, tokens in server.stats.billed)


def test_an_answer_without_usage_keeps_its_reservation_and_says_so(
        server_factory, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SKILLSFT_RUNTIME_DIR", str(tmp_path / "runtime"))
    caplog.set_level(logging.WARNING, logger="skillsft.teacher")
    server = server_factory(omit_usage=True)
    teacher = tpm_teacher(server.base_url, tmp_path / "work")
    results, _ = teacher.run_batch(toy_requests(5), stage="toy")

    assert all(r.ok for r in results)
    requests = toy_requests(5)
    reserved = sum(sum(len(m["content"]) for m in r.messages) // 4 + 40 for r in requests)
    assert teacher.runtime.tpm is not None and teacher.runtime.tpm.used() == reserved
    told = [r.getMessage() for r in caplog.records if "no token usage" in r.getMessage()]
    assert len(told) == 1 and "--tpm" in told[0]


def test_a_window_file_is_shared_by_two_windows(tmp_path):
    """Two MachineWindow objects on one file count each other's starts, as two processes do."""
    import asyncio

    path = tmp_path / "rpm"
    first, second = MachineWindow(path, 3, window_s=60), MachineWindow(path, 3, window_s=60)

    async def take() -> None:
        await first.take(2)
        await second.take(1)

    asyncio.run(take())
    assert first.used() == second.used() == 3


def test_an_unusable_runtime_folder_is_one_line_naming_it(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SKILLSFT_RUNTIME_DIR", str(blocker))
    with pytest.raises(RuntimeDirError) as raised:
        machine_folder(tmp_path / "work", "slots")
    message = str(raised.value)
    assert str(blocker) in message and "SKILLSFT_RUNTIME_DIR" in message and "\n" not in message


def test_a_command_with_an_unusable_runtime_folder_stops_with_one_line(server_factory, tmp_path):
    server = server_factory()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [sys.executable, "-m", "skillsft", "check", "search", "--teacher", "openai",
         "--base-url", server.base_url, "--work-dir", str(tmp_path / "work")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "OPENAI_API_KEY": TEST_API_KEY, "SKILLSFT_RUNTIME_DIR": str(blocker)})
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert str(blocker) in last and "SKILLSFT_RUNTIME_DIR" in last
    assert server.stats.total == 0  # stopped before anything was asked


def test_the_runtime_folder_is_machine_local_by_default() -> None:
    assert runtime_root({"SKILLSFT_RUNTIME_DIR": "/r"}) == Path("/r")
    assert runtime_root({"XDG_RUNTIME_DIR": "/run/user/7"}) == Path("/run/user/7/skillsft")
    assert runtime_root({}).name == f"skillsft-{os.getuid()}"
