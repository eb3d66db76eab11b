"""The teacher's machine-wide slots (pipeline/teacher/slots.py): two processes, each allowed 3
requests in flight, together never have more than 3 in flight at the server."""

import subprocess
import sys
from pathlib import Path

from skillsft.pipeline.teacher.slots import MachineSlots
from tests.support.fixtures import REPO_ROOT


def test_two_processes_share_the_machine_limit(server_factory, tmp_path: Path) -> None:
    server = server_factory(latency=0.1)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.teacher_run", "--base-url", server.base_url,
             "--work-dir", str(tmp_path), "--count", "30", "--concurrency", "3",
             "--prompt-version", f"worker{number}"],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for number in range(2)
    ]
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-2000:]
        assert '"ok": 30' in out
    assert server.stats.stage_requests == 60
    assert server.stats.peak_in_flight <= 3  # each process alone keeps 3 in flight


def test_a_slot_is_held_until_given_back(tmp_path: Path) -> None:
    slots = MachineSlots(tmp_path, 2)
    first, second = slots.try_take(), slots.try_take()
    assert {first, second} == {0, 1} and slots.try_take() is None
    other = MachineSlots(tmp_path, 2)  # another descriptor set: as another process would
    assert other.try_take() is None
    slots.give_back(first)
    assert other.try_take() == first
