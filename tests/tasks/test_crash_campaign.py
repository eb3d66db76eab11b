"""Crash campaign: kill -9 at seeded points in every stage, re-run, and get the same corpus.

A seeded generator picks two kill points per stage. Where a stage pays the teacher, the point is
a size its journal must reach (so the kill lands among journal appends); elsewhere it is a moment
after Luigi logs that it started the stage's task (the work dir's Luigi log), a fraction of the
time the task took in an uninterrupted reference run (these stages take milliseconds, so only
the task's own start is a reliable mark). The test checks that each kill landed
in its stage (the first stage without a manifest at that moment), that the re-run finishes with
a corpus byte-identical to the reference, that the server saw exactly the reference's requests,
and that no request was paid twice beyond the `concurrency` that can be in flight (sent, not yet
journaled) at the kill.

A second seeded set kills `--shards 3` runs: twice among each sharded stage's journal appends
(inside its shard tasks) and once during each merge (timed from the merge task's start, a
fraction of how long the merge took in a sharded reference run); the re-run's corpus must still
be the unsharded reference's.
"""

import contextlib
import os
import random
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from skillsft.pipeline.teacher.journal import Journal
from skillsft.tasks.targets import manifest_path_for
from skillsft.testing.openai_server import FakeOpenAIServer, ServerConfig
from skillsft.testing.stage_responder import stage_responder
from tests.tasks.test_e2e_server import assert_no_key_under, corpus, finish, skillsft

ENV = "alfworld"
SEED = 20261130
CONCURRENCY = 4
# Pinned: the in-flight limit may otherwise grow past --concurrency while the server keeps up,
# and the process's runtime keeps what it learned from stage to stage, so "at most the calls in
# flight paid twice" is checked against a known number of calls in flight.
PACE = ("--concurrency", str(CONCURRENCY), "--max-concurrency", str(CONCURRENCY))
# A merge shorter than this in the reference run cannot be aimed at (the test polls every
# 2 ms, and a kill takes time to land); merges write atomically, so a kill "inside" one is a
# kill before or after it, which the other points cover.
MIN_AIMABLE_MERGE_S = 0.05
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
TASK_OF = {
    "parse": "ParseRollouts",
    "memories": "GenerateMemories",
    "aggregate": "AggregateSkillBank",
    "distill": "Distill",
    "flatten": "Flatten",
    "report": "BuildReport",
}
LOG_LINE = re.compile(r"^(\S+ \S+) luigi-interface.* (running|done)\s+(\w+)\(", re.MULTILINE)
JOURNAL_OF = {
    "memories": "teacher_memory.jsonl",
    "aggregate": "teacher_aggregate.jsonl",
    "distill": "teacher_distill.jsonl",
}


@dataclass(frozen=True)
class KillPoint:
    stage: str
    fraction: float  # of the stage's journal size, or of its duration in the reference run
    merge: bool = False  # sharded runs: during the merge of the stage's shards

    def __str__(self) -> str:
        return f"{self.stage}{'-merge' if self.merge else ''}@{self.fraction:.2f}"


def kill_points(seed: int = SEED) -> list[KillPoint]:
    rng = random.Random(seed)
    points = [KillPoint(stage, round(rng.uniform(0.1, 0.7), 2)) for stage in STAGES
              for _ in range(2)]
    rng.shuffle(points)
    return points


SHARDS = 3
SHARDED_STAGES = ("memories", "distill")


def sharded_kill_points(seed: int = SEED) -> list[KillPoint]:
    """Kills in a `--shards 3` run: two among each sharded stage's journal appends (inside
    shard tasks) and one during each merge."""
    rng = random.Random(seed + 5)
    return [KillPoint(stage, round(rng.uniform(0.1, 0.7), 2), merge) for stage in SHARDED_STAGES
            for merge in (False, False, True)]


def manifest_done(work: Path, stage: str) -> bool:
    return manifest_path_for(work / OUTPUT_OF[stage]).exists()


def stage_running(work: Path) -> str:
    """The first stage whose output is not made yet: where a kill at this moment lands."""
    return next((stage for stage in STAGES if not manifest_done(work, stage)), "finished")


@dataclass
class Reference:
    corpus: bytes
    prompts: set[str]
    duration: dict[str, float]  # seconds from Luigi's "running" to its "done", per stage
    journal_size: dict[str, int]
    merge_duration: dict[str, float]  # of the sharded stages' merges, in a sharded run


def luigi_log(work: Path) -> str:
    return "".join(path.read_text() for path in (work / ".skillsft" / "logs").glob("*.log"))


def task_durations(work: Path) -> dict[str, float]:
    events = {(event, task): datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
              for stamp, event, task in LOG_LINE.findall(luigi_log(work))}
    return {stage: (events["done", task] - events["running", task]).total_seconds()
            for stage, task in TASK_OF.items()}


def task_started(work: Path, stage: str) -> bool:
    folder = work / ".skillsft" / "logs"
    return folder.is_dir() and f"running   {TASK_OF[stage]}(" in luigi_log(work)


def start_server() -> FakeOpenAIServer:
    return FakeOpenAIServer(ServerConfig(responder=stage_responder, latency=LATENCY)).start()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    server = start_server()
    work = tmp_path_factory.mktemp("crash_reference")
    sharded = tmp_path_factory.mktemp("crash_reference_sharded")
    try:
        finish(skillsft(ENV, work, server.base_url, *PACE))
        finish(skillsft(ENV, sharded, server.base_url, *PACE,
                        "--shards", str(SHARDS)))
        assert corpus(sharded, ENV) == corpus(work, ENV)
        yield Reference(
            corpus=corpus(work, ENV),
            prompts=set(server.stats.paid_by_prompt),
            duration=task_durations(work),
            journal_size={s: (work / "journal" / name).stat().st_size
                          for s, name in JOURNAL_OF.items()},
            merge_duration={s: task_durations(sharded)[s] for s in SHARDED_STAGES},
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
    wait_for(process, lambda: task_started(work, point.stage), f"{point.stage} to start")
    started = time.monotonic()
    if point.merge:
        delay = point.fraction * reference.merge_duration[point.stage]
        wait_for(process, lambda: time.monotonic() - started >= delay, f"{point}")
        return
    if point.stage in JOURNAL_OF:
        journal = work / "journal" / JOURNAL_OF[point.stage]
        threshold = max(1, int(point.fraction * reference.journal_size[point.stage]))
        wait_for(process, lambda: journal.exists() and journal.stat().st_size >= threshold,
                 f"{journal.name} to reach {threshold} bytes")
        return
    delay = point.fraction * reference.duration[point.stage]
    wait_for(process, lambda: time.monotonic() - started >= delay, f"{point}")


def kill_in_stage(tmp_path: Path, point: KillPoint, reference: Reference,
                  tries: int = 3, extra: tuple[str, ...] = ()) -> tuple[FakeOpenAIServer, Path]:
    """Start a run and kill -9 it at the point; returns its server and work dir.

    A fast stage can finish before a kill timed from the reference run arrives (the machine
    may be busier now than then): such a miss is retried, in a fresh work dir, at half the
    delay, so every kill still lands in the stage it was aimed at.
    """
    for attempt in range(tries):
        server = start_server()
        work = tmp_path / f"w{attempt}"
        process = skillsft(ENV, work, server.base_url, *PACE, *extra)
        aimed = KillPoint(point.stage, point.fraction / 2**attempt, point.merge)
        with contextlib.suppress(AssertionError):  # the run ended first: a miss, seen below
            reach(process, work, aimed, reference)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        landed = stage_running(work)
        if landed == point.stage:
            return server, work
        server.stop()
        order = [*STAGES, "finished"]
        assert order.index(landed) > order.index(point.stage), f"{point} landed in {landed}"
    raise AssertionError(f"{tries} kills aimed at {point} all landed after {point.stage}")


@pytest.mark.parametrize("point", kill_points(), ids=str)
def test_kill_9_then_rerun_gives_the_same_corpus(
        tmp_path: Path, reference: Reference, point: KillPoint) -> None:
    server, work = kill_in_stage(tmp_path, point, reference)
    try:
        assert not manifest_done(work, "report")
        finish(skillsft(ENV, work, server.base_url, *PACE))
        paid = server.stats.paid_by_prompt
    finally:
        server.stop()
    assert corpus(work, ENV) == reference.corpus
    assert set(paid) == reference.prompts  # the same requests, no stray ones
    paid_again = sum(count - 1 for count in paid.values())
    assert paid_again <= CONCURRENCY, f"{paid_again} answers paid twice, {CONCURRENCY} in flight"
    assert_no_key_under(work)


@pytest.mark.parametrize("point", sharded_kill_points(), ids=str)
def test_kill_9_in_a_sharded_run_then_rerun_gives_the_same_corpus(
        tmp_path: Path, reference: Reference, point: KillPoint) -> None:
    """Kills inside shard tasks and inside the merges; the re-run (sharded too) ends with the
    unsharded reference's corpus and pays for nothing twice beyond what was in flight."""
    sharded = ("--shards", str(SHARDS))
    took = reference.merge_duration[point.stage]
    if point.merge and took < MIN_AIMABLE_MERGE_S:
        pytest.skip(f"the {point.stage} merge took {took * 1000:.0f} ms in the reference run: "
                    "too short to aim a kill inside it")
    server, work = kill_in_stage(tmp_path, point, reference, extra=sharded)
    try:
        if point.merge:  # the kill came after every shard was done
            assert len(list((work / "shards" / point.stage).glob("part-*.json"))) == SHARDS
        finish(skillsft(ENV, work, server.base_url, *PACE, *sharded))
        paid = server.stats.paid_by_prompt
    finally:
        server.stop()
    assert corpus(work, ENV) == reference.corpus
    assert set(paid) == reference.prompts
    assert sum(count - 1 for count in paid.values()) <= CONCURRENCY


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
    server, work = kill_in_stage(tmp_path, point, reference)
    try:
        claims = work / "journal" / "teacher_distill.jsonl.claims"
        assert list(claims.glob("*.lease"))  # the dead run's leases, left behind by kill -9
        finish(skillsft(ENV, work, server.base_url, *PACE))
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
