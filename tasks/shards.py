"""Sharded teacher stages: split the trajectories once, one task per shard, one merge.

    ParseRollouts -> SplitTrajectories -> MemoryShard x N  -> GenerateMemories (the merge)
                                       -> DistillShard x N -> Distill (the merge)

With `--shards N` (N > 1) GenerateMemories and Distill stop calling the teacher themselves:
they require their N shard tasks and merge the shards' files into today's file
(`generated_memories.json`, `distilled_trajectories.json`) and rejects file, byte-identical to
an unsharded run (pipeline/stages/shards.py says how). Each shard task has its own atomic target and
manifest under `shards/` in the work dir, so Luigi workers — in one process, in several
`skillsft run` processes, or on several machines sharing one luigid — each take whole shards,
and a shard done is never done again. Two processes that do meet on one shard (no central
scheduler) still pay for each request once: the journal's claims see to it.

The split reads the stage-1 file once, as a stream, and writes an index: for each shard, its
records' positions and byte spans in that file. A shard task seeks to its own records (not the
whole corpus, and no copy of them) before it calls the teacher; the merge streams the shards'
files in order (pipeline/stages/shards.py).
The merges keep the unsharded fingerprint (their upstream is still stage 1), so changing N
never invalidates a finished stage or anything after it. skillsft/graph.py composes them.
"""

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

import luigi
import orjson

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.file_kinds import check_kind
from skillsft.pipeline.formats.record_files import TRAJECTORIES, LoadedRecords, validate_records
from skillsft.pipeline.formats.record_stream import NotAnArray, read_span, scan_array
from skillsft.pipeline.stages.result import StageResult
from skillsft.pipeline.stages.shards import ShardResult, index_spans, shard_file_chunks
from skillsft.pipeline.stages.skill_selection import scorer_for
from skillsft.pipeline.teacher.plan import build_teacher, embedding_client
from skillsft.tasks.base import StageOutput, StageTask
from skillsft.tasks.stages import Distill, GenerateMemories

SHARDS_DIR = "shards"


def part_name(shard: int, shards: int) -> str:
    return f"part-{shard:05d}-of-{shards:05d}.json"


class SplitTrajectories(StageTask):
    """Which of stage 1's records each of `shards` parts holds: an index of positions and
    byte spans into stage 1's file (no record is copied). Work dirs split before the index
    kept copied part files beside it; their shards still read those."""

    stage = "split"
    shards = luigi.IntParameter()  # significant here: it shapes the parts

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return f"{SHARDS_DIR}/trajectories/{self.shards:05d}/index.json"

    def fingerprinted_params(self) -> dict[str, Any]:
        return {**super().fingerprinted_params(), "shards": self.shards}

    def part_path(self, shard: int) -> Path:
        return self.output_file().parent / part_name(shard, self.shards)

    def compute(self) -> StageOutput:
        source = self.input_files()[0]
        with open(source, "rb") as handle:
            parts = index_spans(checked_elements(source, handle), self.shards)
        return StageOutput(
            payload=orjson.dumps({
                "source": str(source), "bytes": source.stat().st_size,
                "sizes": [len(p.positions) for p in parts],
                "parts": [{"positions": p.positions, "spans": p.spans} for p in parts]}),
            counts={"inputs": sum(len(p.positions) for p in parts), "outputs": len(parts)},
        )


def checked_elements(source: Path, handle: BinaryIO) -> Iterator[tuple[int, bytes, Any]]:
    """Stage 1's elements (offset, bytes, record), after the checks a loader makes on the
    file."""
    elements = scan_array(handle)
    try:
        first = next(elements, None)
    except NotAnArray as exc:
        raise ValueError(f"{source}: expected a JSON list of processed trajectories, got "
                         f"{exc.kind}") from None
    if first is None:
        return
    check_kind(source, [first[2]], "processed trajectories")
    yield first
    yield from elements


def read_part(index_path: Path, source: Path, shard: int, old_part: Path) -> dict[str, Any]:
    """One shard's records: through the split's index of spans into `source` (stage 1's file
    where it is now), or (a work dir split by an earlier version) from the part file it
    copied."""
    index = orjson.loads(index_path.read_bytes())
    if "parts" not in index:
        return orjson.loads(old_part.read_bytes())  # type: ignore[no-any-return]
    if source.stat().st_size != index["bytes"]:
        raise InputError(f"{source} changed after it was split into shards ({index_path}); "
                         f"delete {index_path.parent} and re-run to split it anew")
    part = index["parts"][shard]
    with open(source, "rb") as handle:
        records = [read_span(handle, offset, length) for offset, length in part["spans"]]
    return {"source": str(source), "positions": part["positions"], "records": records}


class ShardOf:
    """Mixin of a shard task: its place among the shards and where its file lives. Its one
    input is the split (then, for distillation, the skill bank)."""

    shard = luigi.IntParameter()
    shards = luigi.IntParameter()

    @property
    def output_name(self) -> str:
        stage: str = self.stage  # type: ignore[attr-defined]
        return f"{SHARDS_DIR}/{stage}/{part_name(self.shard, self.shards)}"

    def fingerprinted_params(self) -> dict[str, Any]:
        base = super().fingerprinted_params()  # type: ignore[misc]
        return {**base, "shard": self.shard, "shards": self.shards}

    def read_part(self) -> dict[str, Any]:
        split: SplitTrajectories = self.inputs[0]  # type: ignore[attr-defined]
        return read_part(split.output_file(), split.input_files()[0], self.shard,
                         split.part_path(self.shard))

    def worker_mark(self) -> dict[str, Any]:
        """Which worker made this shard (kept in its file: tests and users can see how the
        workers shared a stage)."""
        import os
        import socket

        return {"host": socket.gethostname(), "pid": os.getpid()}


def shard_payload(result: ShardResult, source: str, worker: dict[str, Any]) -> Iterator[bytes]:
    return shard_file_chunks(result, {"source": source, "worker": worker})


def shard_result(result: StageResult[Any], loaded: LoadedRecords[Any]) -> ShardResult:
    """A shard's stage result in the merge's terms: each record and reject with its position
    in the whole input (the loader's rejects first, as `absorb_load` lists them)."""
    once = result.extras.get("block_counts", {})
    keyed = {name for counts in once.values() for name in counts}
    return ShardResult(
        items=[(p, jsonio.to_jsonable(r)) for p, r in
               zip(result.extras["positions"], result.records, strict=True)],
        rejects=[(0, p, jsonio.to_jsonable(r)) for p, r in
                 zip(loaded.reject_positions, loaded.rejects, strict=True)]
        + [(phase, p, jsonio.to_jsonable(r)) for (phase, p), r in
           zip(result.extras["reject_order"], result.rejects[len(loaded.rejects):],
               strict=True)],
        counts={name: n - sum(c.get(name, 0) for c in once.values()) if name in keyed else n
                for name, n in result.counts.items()},
        keyed_counts=once,
    )


def shard_output(result: ShardResult, source: str, worker: dict[str, Any],
                 teacher: list[Any]) -> StageOutput:
    return StageOutput(payload=shard_payload(result, source, worker), counts=result.counts,
                       teacher=[stats.model_dump(mode="json") for stats in teacher])


class MemoryShard(ShardOf, GenerateMemories):
    """Memories for one shard's records."""

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.memories import generate_memories

        part = self.read_part()
        source = part["source"]
        loaded = validate_records(part["records"], source, TRAJECTORIES, self.stage,
                                  part["positions"])
        if not loaded.records and not loaded.rejects:
            return shard_output(ShardResult(), source, self.worker_mark(), [])
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        options = replace(self.memories, input_name=source)
        result = generate_memories(loaded.records, get_env(self.env), options, teacher,
                                   positions=loaded.positions)
        result.absorb_load(loaded)
        return shard_output(shard_result(result, loaded), source, self.worker_mark(),
                            result.teacher)


class DistillShard(ShardOf, Distill):
    """Conversations for one shard's records (inputs: the split, then the skill bank)."""

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.distill import distill
        from skillsft.pipeline.stages.skill_bank_io import load_skill_bank

        spec = get_env(self.env)
        part = self.read_part()
        source = part["source"]
        loaded = validate_records(part["records"], source, TRAJECTORIES, self.stage,
                                  part["positions"])
        if not loaded.records and not loaded.rejects:
            return shard_output(ShardResult(), source, self.worker_mark(), [])
        bank = load_skill_bank(self.input_file("skill_bank"), spec)
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        options = replace(self.distill, input_name=source)
        scorer = scorer_for(embedding_client(options.skills, self.teacher, Path(self.work_dir)))
        result = distill(loaded.records, spec, options, teacher, bank, scorer,
                         positions=loaded.positions)
        result.absorb_load(loaded)
        return shard_output(shard_result(result, loaded), source, self.worker_mark(),
                            result.teacher)


def sharded(stage: type[GenerateMemories] | type[Distill], shards: int,
            inputs: tuple[luigi.Task, ...], **params: Any) -> GenerateMemories | Distill:
    """A teacher stage over `inputs` (stage 1's records first), cut into `shards` shard tasks
    when `shards` > 1 and merged back; with one shard, the stage itself."""
    if shards <= 1:
        return stage(inputs=inputs, **params)
    place = {k: params[k] for k in ("env", "work_dir")}
    split = SplitTrajectories(**place, inputs=inputs[:1], shards=shards)
    shard_cls = MemoryShard if stage is GenerateMemories else DistillShard
    shard_params = {k: v for k, v in params.items() if k != "output_path"}
    parts = tuple(shard_cls(**shard_params, inputs=(split, *inputs[1:]), shard=i, shards=shards)
                  for i in range(shards))
    return stage(inputs=inputs, shard_tasks=parts, **params)
