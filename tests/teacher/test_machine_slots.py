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


def test_a_slot_given_back_passes_to_this_process_waiter_and_others_get_freed_ones(
        tmp_path: Path) -> None:
    """Within a process a slot passes from one request to the next waiting one without being
    unlocked (another process cannot take it meanwhile); a slot the process frees with nobody
    waiting reaches a waiter of another process; a waiter cancelled while queued takes none."""
    import asyncio

    ours, theirs = MachineSlots(tmp_path, 1), MachineSlots(tmp_path, 1)  # two descriptor sets

    async def scenario() -> list[str]:
        seen: list[str] = []
        first_in = asyncio.Event()
        release_first = asyncio.Event()

        async def first() -> None:
            async with ours.slot():
                first_in.set()
                await release_first.wait()
            taken = theirs.try_take()  # the moment ours gives it back, with a waiter queued
            seen.append(f"free at the hand-over: {taken is not None}")
            if taken is not None:
                theirs.give_back(taken)

        async def second() -> None:
            async with ours.slot():
                seen.append("second in")

        async def cancelled() -> None:
            async with ours.slot():
                seen.append("the cancelled waiter ran")

        holder = asyncio.create_task(first())
        await first_in.wait()
        queued = asyncio.create_task(second())
        doomed = asyncio.create_task(cancelled())
        await asyncio.sleep(0.02)
        doomed.cancel()
        release_first.set()
        await asyncio.gather(holder, queued)
        await asyncio.gather(doomed, return_exceptions=True)
        async with asyncio.timeout(10):
            async with theirs.slot():  # ours holds nothing now: the other process gets it
                seen.append("theirs in")
        return seen

    assert asyncio.run(scenario()) == ["free at the hand-over: False", "second in", "theirs in"]
    assert ours.try_take() == 0  # nothing leaked
