"""Sharded teacher stages: split the trajectories once, one task per shard, one merge.

    ParseRollouts -> SplitTrajectories -> MemoryShard x N  -> GenerateMemories (the merge)
                                       -> DistillShard x N -> Distill (the merge)

With `--shards N` (N > 1) GenerateMemories and Distill stop calling the teacher themselves:
they require their N shard tasks and merge the shards' files into today's file
(`generated_memories.json`, `distilled_trajectories.json`) and rejects file, byte-identical to
an unsharded run (pipeline/shards.py says how). Each shard task has its own atomic target and
manifest under `shards/` in the work dir, so Luigi workers — in one process, in several
`skillsft run` processes, or on several machines sharing one luigid — each take whole shards,
and a shard done is never done again. Two processes that do meet on one shard (no central
scheduler) still pay for each request once: the journal's claims see to it.

The split reads the stage-1 file once and writes each shard's records with their positions, so
a shard task reads only its own records (not the whole corpus) before it calls the teacher.
The merges keep the unsharded fingerprint (their upstream is still stage 1), so changing N
never invalidates a finished stage or anything after it.
"""

from pathlib import Path
from typing import Any

import luigi
import orjson

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.file_kinds import check_kind
from skillsft.pipeline.formats.records import validate_trajectory_records
from skillsft.pipeline.shards import ShardResult, merge_results, partition
from skillsft.pipeline.stages.outcome import StageOutcome
from skillsft.pipeline.teacher.base import BatchStats
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask
from skillsft.tasks.params import FailureParams, SelectionParams
from skillsft.tasks.stages import (
    Distill,
    FromInputs,
    GenerateMemories,
    ParseRollouts,
    memory_rejects,
    rejects_lines,
)
from skillsft.tasks.teacher import build_teacher, stats_to_dict

SHARDS_DIR = "shards"


def part_name(shard: int, shards: int) -> str:
    return f"part-{shard:05d}-of-{shards:05d}.json"


class SplitTrajectories(FromInputs, SelectionParams, FailureParams, StageTask):
    """The stage-1 records cut into `shards` parts, each with the records' positions."""

    stage = "split"
    shards = luigi.IntParameter()  # significant here: it shapes the parts
    shaping_params = ("shards",)

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return f"{SHARDS_DIR}/trajectories/{self.shards:05d}/index.json"

    def upstream(self) -> luigi.Task:
        return self.clone(ParseRollouts)

    def part_path(self, shard: int) -> Path:
        return self.output_file().parent / part_name(shard, self.shards)

    def compute(self) -> StageOutput:
        source = self.input_files()[0]
        records = jsonio.load(source)
        check_kind(source, records, "processed trajectories")
        if not isinstance(records, list):
            raise ValueError(f"{source}: expected a JSON list of processed trajectories")
        parts = partition(records, self.shards)
        return StageOutput(
            payload=jsonio.dumps({"source": str(source),
                                  "sizes": [len(p.positions) for p in parts]}),
            counts={"inputs": len(records), "outputs": len(parts)},
            side_files={
                part_name(i, self.shards): orjson.dumps(
                    {"source": str(source), "positions": p.positions, "records": p.records})
                for i, p in enumerate(parts)
            },
        )


def read_part(split: SplitTrajectories, shard: int) -> dict[str, Any]:
    return orjson.loads(split.part_path(shard).read_bytes())


class ShardOf:
    """Mixin of a shard task: its place among the shards and where its file lives."""

    shard = luigi.IntParameter()
    shards = luigi.IntParameter()

    @property
    def output_name(self) -> str:
        stage: str = self.stage  # type: ignore[attr-defined]
        return f"{SHARDS_DIR}/{stage}/{part_name(self.shard, self.shards)}"

    def split(self) -> SplitTrajectories:
        # output_path names the merged file of a single-stage command, never a part.
        return self.clone(SplitTrajectories, output_path="")  # type: ignore[attr-defined,no-any-return]

    def upstream_tasks(self) -> list[StageTask]:
        return [dep for dep in luigi.task.flatten(self.requires())  # type: ignore[attr-defined]
                if isinstance(dep, StageTask)]

    def fingerprinted_params(self) -> dict[str, Any]:
        base = super().fingerprinted_params()  # type: ignore[misc]
        return {**base, "shard": self.shard, "shards": self.shards}

    def worker_mark(self) -> dict[str, Any]:
        """Which worker made this shard (the manifest keeps it: tests and users can see how
        the workers shared a stage)."""
        import os
        import socket

        return {"host": socket.gethostname(), "pid": os.getpid()}


def shard_payload(result: ShardResult, source: str, worker: dict[str, Any]) -> bytes:
    return orjson.dumps({**result.to_json(), "source": source, "worker": worker})


class MemoryShard(ShardOf, GenerateMemories):
    """Memories for one shard's records."""

    def requires(self) -> list[luigi.Task]:
        return [self.split()]

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.memories import MemoryOptions, generate_memories

        part = read_part(self.split(), self.shard)
        source = part["source"]
        result = ShardResult()
        teacher_stats: list[dict[str, Any]] = []
        if part["records"]:
            teacher = build_teacher(self, "memory", self.memory_model)
            options = MemoryOptions(all_trajectories=self.all_trajectories, failure_threshold=1.0)
            made = generate_memories(part["records"], get_env(self.env), teacher, options,
                                     positions=part["positions"])
            rejects = memory_rejects(self.stage, source, made.failures)
            result = ShardResult(
                items=[(p, jsonio.to_jsonable(m)) for p, m in zip(made.positions, made.memories,
                                                                  strict=True)],
                rejects=[(f.phase, f.position, jsonio.to_jsonable(r))
                         for f, r in zip(made.failures, rejects, strict=True)],
                counts=made.counts,
            )
            teacher_stats = [stats_to_dict(made.stats)]
        return StageOutput(payload=shard_payload(result, source, self.worker_mark()),
                           counts=result.counts, teacher=teacher_stats)


class DistillShard(ShardOf, Distill):
    """Conversations for one shard's records."""

    def requires(self) -> list[luigi.Task]:
        return [self.split(), self.bank_task()]

    def compute(self) -> StageOutput:
        from skillsft.pipeline.formats.conversations import RenderOptions
        from skillsft.pipeline.formats.skill_bank_io import load_skill_bank
        from skillsft.pipeline.stages.distill import DistillOptions, distill

        spec = get_env(self.env)
        part = read_part(self.split(), self.shard)
        source = part["source"]
        loaded = validate_trajectory_records(part["records"], source, self.stage,
                                             part["positions"])
        result = ShardResult(rejects=[(0, p, jsonio.to_jsonable(r)) for p, r in
                                      zip(loaded.reject_positions, loaded.rejects, strict=True)],
                             counts={"inputs": len(part["records"])})
        teacher_stats: list[dict[str, Any]] = []
        if loaded.records:
            bank = load_skill_bank(Path(self.input()[1].path), spec)
            teacher = build_teacher(self, "distill", self.distill_model)
            options = DistillOptions(
                render=RenderOptions(history=self.history, seed=self.seed,
                                     search_information=self.keep_information),
                input_name=source,
                skills=self.skill_selection(),
            )
            made = distill(loaded.records, spec, bank, teacher, options, self.scorer(),
                           positions=loaded.positions)
            once = {name for keyed in made.block_counts.values() for name in keyed}
            counts = {name: n - sum(k.get(name, 0) for k in made.block_counts.values())
                      if name in once else n for name, n in made.counts.items()}
            result.items = [(p, jsonio.to_jsonable(c)) for p, c in
                            zip(made.positions, made.conversations, strict=True)]
            result.rejects += [(phase, p, jsonio.to_jsonable(r)) for (phase, p), r in
                               zip(made.failure_order, made.failures, strict=True)]
            result.counts = {**counts, "inputs": len(part["records"])}
            result.keyed_counts = made.block_counts
            teacher_stats = [stats_to_dict(made.stats)] if made.stats else []
        return StageOutput(payload=shard_payload(result, source, self.worker_mark()),
                           counts=result.counts, teacher=teacher_stats)


SHARD_TASK_OF: dict[str, type[StageTask]] = {"memories": MemoryShard, "distill": DistillShard}


def shard_tasks(stage_task: StageTask) -> list[luigi.Task]:
    """The shard tasks a sharded stage merges (none when it runs unsharded)."""
    shards: int = stage_task.shards  # type: ignore[attr-defined]
    if shards <= 1:
        return []
    shard_cls = SHARD_TASK_OF[stage_task.stage_name()]
    return [stage_task.clone(shard_cls, shard=i, shards=shards, output_path="")
            for i in range(shards)]


def read_shards(stage_task: StageTask) -> tuple[list[ShardResult], str, list[dict[str, Any]]]:
    """The shard results in shard order, the input's name, and each shard's teacher usage."""
    results, usage, source = [], [], ""
    for target in luigi.task.flatten(stage_task.input()):
        data = orjson.loads(Path(target.path).read_bytes())
        results.append(ShardResult.from_json(data))
        source = data["source"]
        usage.extend((target.read_manifest() or {}).get("teacher", []))
    return results, source, usage


def merged_usage(usage: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shards' teacher usage as one batch's, as an unsharded stage reports it."""
    if not usage:
        return []
    total = BatchStats.model_validate(usage[0])
    for part in usage[1:]:
        total.absorb(BatchStats.model_validate(part))
    return [stats_to_dict(total)]


def merge_memories(task: GenerateMemories) -> StageOutput:
    parts, source, usage = read_shards(task)
    merged = merge_results(parts)
    rejects = [Reject.model_validate(r) for r in merged.rejects]
    counts = {**merged.counts, "inputs": merged.counts.get("records", 0),
              "outputs": len(merged.items), "rejected": len(rejects)}
    return StageOutput(
        payload=jsonio.dumps(merged.items),
        counts=counts,
        teacher=merged_usage(usage),
        side_files={"memories_rejects.jsonl": rejects_lines(rejects)},
        outcome=StageOutcome(task.stage, source, "trajectories",
                             merged.counts.get("trajectories_attempted", 0), len(rejects),
                             len(merged.items), rejects),
        rejects_name="memories_rejects.jsonl",
    )


def merge_distill(task: Distill) -> StageOutput:
    parts, source, usage = read_shards(task)
    merged = merge_results(parts)
    rejects = [Reject.model_validate(r) for r in merged.rejects]
    invalid = sum(1 for r in rejects if r.reason == "invalid_record")
    counts = {**merged.counts, "outputs": len(merged.items), "rejected": len(rejects)}
    return StageOutput(
        payload=jsonio.dumps(merged.items),
        counts=counts,
        teacher=merged_usage(usage),
        side_files={"distill_rejects.jsonl": rejects_lines(rejects)},
        outcome=StageOutcome(task.stage, source, "trajectories",
                             merged.counts.get("trajectories_attempted", 0) + invalid,
                             len(rejects), len(merged.items), rejects),
        rejects_name="distill_rejects.jsonl",
    )
