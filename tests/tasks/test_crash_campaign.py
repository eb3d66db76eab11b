"""Crash campaign: kill -9 at seeded points in every stage, re-run, and get the same corpus.

A seeded generator picks two kill points per stage. Where a stage pays the teacher, the point is
a size its journal must reach (so the kill lands among journal appends); elsewhere it is a moment
between the previous stage's manifest and the stage's first output file, as measured on an
uninterrupted reference run (these stages take milliseconds once Luigi starts them, so a window
reaching their manifest would be missed by any poller). The test checks that each kill landed
in its stage (the first stage without a manifest at that moment), that the re-run finishes with
a corpus byte-identical to the reference, that the server saw exactly the reference's requests,
and that no request was paid twice beyond the `concurrency` that can be in flight (sent, not yet
journaled) at the kill.
"""

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from skillsft.pipeline.teacher.journal import Journal
from skillsft.tasks.targets import manifest_path_for
from tests.support.openai_server import FakeOpenAIServer, ServerConfig
from tests.support.stage_responder import stage_responder
from tests.tasks.test_e2e_server import assert_no_key_under, corpus, finish, skillsft

ENV = "alfworld"
SEED = 20261130
CONCURRENCY = 4
LATENCY = 0.05
STAGES = ("parse", "memories", "aggregate", "distill", "flatten", "report")
OUTPUT_OF = {
    "parse": "processed_trajectories.json",
    "memories": "generated_memories.json",
    "aggregate": "skill_bank.json",
    "distill": "distilled_trajectories.json",
    "flatten": f"{ENV}_sft_data.json",
    "report": "report.json",  # the skill document is written between flatten and report
}
JOURNAL_OF = {
    "memories": "teacher_memory.jsonl",
    "aggregate": "teacher_aggregate.jsonl",
    "distill": "teacher_distill.jsonl",
}


@dataclass(frozen=True)
class KillPoint:
    stage: str
    fraction: float  # of the stage's journal size, or of its duration in the reference run

    def __str__(self) -> str:
        return f"{self.stage}@{self.fraction:.2f}"


def kill_points(seed: int = SEED) -> list[KillPoint]:
    rng = random.Random(seed)
    points = [KillPoint(stage, round(rng.uniform(0.1, 0.7), 2)) for stage in STAGES
              for _ in range(2)]
    rng.shuffle(points)
    return points


def manifest_done(work: Path, stage: str) -> bool:
    return manifest_path_for(work / OUTPUT_OF[stage]).exists()


def stage_running(work: Path) -> str:
    """The first stage whose output is not made yet: where a kill at this moment lands."""
    return next((stage for stage in STAGES if not manifest_done(work, stage)), "finished")


def run_lock(work: Path) -> Path:
    return work / ".skillsft" / "run.lock"


@dataclass
class Reference:
    corpus: bytes
    prompts: set[str]
    window: dict[str, float]  # seconds from the previous manifest (or run.lock) to the output
    journal_size: dict[str, int]


def observe(work: Path, done: Callable[[], bool]) -> dict[str, float]:
    """When run.lock and each stage's manifest appear, in seconds after run.lock."""
    seen: dict[str, float] = {}
    while not done():
        now = time.monotonic()
        if "lock" not in seen and run_lock(work).exists():
            seen["lock"] = now
        for stage in STAGES:
            if stage not in seen and manifest_done(work, stage):
                seen[stage] = now
            if f"{stage} output" not in seen and (work / OUTPUT_OF[stage]).exists():
                seen[f"{stage} output"] = now
        time.sleep(0.002)
    return {name: at - seen["lock"] for name, at in seen.items()}


def start_server() -> FakeOpenAIServer:
    return FakeOpenAIServer(ServerConfig(responder=stage_responder, latency=LATENCY)).start()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    server = start_server()
    work = tmp_path_factory.mktemp("crash_reference")
    try:
        process = skillsft(ENV, work, server.base_url, "--concurrency", str(CONCURRENCY))
        seen: dict[str, float] = {}
        watcher = threading.Thread(
            target=lambda: seen.update(observe(work, lambda: process.poll() is not None)))
        watcher.start()
        finish(process)
        watcher.join()
        starts = dict(zip(STAGES, [0.0, *(seen[stage] for stage in STAGES[:-1])], strict=True))
        yield Reference(
            corpus=corpus(work, ENV),
            prompts=set(server.stats.paid_by_prompt),
            window={stage: seen[f"{stage} output"] - starts[stage] for stage in STAGES},
            journal_size={s: (work / "journal" / name).stat().st_size
                          for s, name in JOURNAL_OF.items()},
        )
    finally:
        server.stop()


def wait_for(process, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 300
    while not condition():
        assert process.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def reach(process, work: Path, point: KillPoint, reference: Reference) -> None:
    """Block until the run is at the kill point."""
    wait_for(process, lambda: run_lock(work).exists(), "the run lock")
    locked = time.monotonic()
    stage_index = STAGES.index(point.stage)
    if stage_index:
        previous = STAGES[stage_index - 1]
        wait_for(process, lambda: manifest_done(work, previous), f"{previous} to finish")
    if point.stage in JOURNAL_OF:
        journal = work / "journal" / JOURNAL_OF[point.stage]
        threshold = max(1, int(point.fraction * reference.journal_size[point.stage]))
        wait_for(process, lambda: journal.exists() and journal.stat().st_size >= threshold,
                 f"{journal.name} to reach {threshold} bytes")
        return
    begun = time.monotonic() if stage_index else locked
    delay = point.fraction * reference.window[point.stage]
    wait_for(process, lambda: time.monotonic() - begun >= delay, f"{point}")


@pytest.mark.parametrize("point", kill_points(), ids=str)
def test_kill_9_then_rerun_gives_the_same_corpus(
        tmp_path: Path, reference: Reference, point: KillPoint) -> None:
    server = start_server()
    work = tmp_path / "w"
    try:
        process = skillsft(ENV, work, server.base_url, "--concurrency", str(CONCURRENCY))
        reach(process, work, point, reference)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        landed = stage_running(work)
        assert landed == point.stage, f"aimed at {point}, landed in {landed}"
        assert not manifest_done(work, "report")

        finish(skillsft(ENV, work, server.base_url, "--concurrency", str(CONCURRENCY)))
        paid = server.stats.paid_by_prompt
    finally:
        server.stop()
    assert corpus(work, ENV) == reference.corpus
    assert set(paid) == reference.prompts  # the same requests, no stray ones
    paid_again = sum(count - 1 for count in paid.values())
    assert paid_again <= CONCURRENCY, f"{paid_again} answers paid twice, {CONCURRENCY} in flight"
    assert_no_key_under(work)


def test_the_kill_points_are_seeded_and_reach_every_stage() -> None:
    assert kill_points() == kill_points()
    assert kill_points(SEED + 1) != kill_points()
    assert {point.stage for point in kill_points()} == set(STAGES)
    assert len(kill_points()) >= 10


def test_kill_9_with_lease_claims_then_rerun(
        tmp_path: Path, reference: Reference, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same crash with the claims cluster file systems use (forced: this disk has flock):
    the dead run's leases are taken over at once (same host, pid gone) by the re-run."""
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "lease")
    point = next(point for point in kill_points() if point.stage == "distill")
    server = start_server()
    work = tmp_path / "w"
    try:
        process = skillsft(ENV, work, server.base_url, "--concurrency", str(CONCURRENCY))
        reach(process, work, point, reference)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        assert stage_running(work) == "distill"
        claims = work / "journal" / "teacher_distill.jsonl.claims"
        assert list(claims.glob("*.lease"))  # the dead run's leases, left behind by kill -9
        finish(skillsft(ENV, work, server.base_url, "--concurrency", str(CONCURRENCY)))
        paid = server.stats.paid_by_prompt
    finally:
        server.stop()
    assert corpus(work, ENV) == reference.corpus
    assert sum(count - 1 for count in paid.values()) <= CONCURRENCY
    # A lease can outlive kill -9 only where its answer was journaled before the kill: nobody
    # needs that claim again (such files are harmless and documented as such).
    journal = Journal(work / "journal" / "teacher_distill.jsonl")
    left = [path.name.removesuffix(".lease") for path in claims.glob("*.lease")]
    assert all(journal.latest_response(key) is not None for key in left), left
