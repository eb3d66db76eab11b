"""What a sharded stage does in place of its own work: merge its shard tasks' files.

Kept apart from the shard tasks (tasks/shards.py), which subclass the stage tasks: the stages
use this module, so the stage and shard modules do not import each other. Which shard tasks a
stage merges is decided where the graph is composed (skillsft/graph.py).
"""

from pathlib import Path
from typing import Any

import luigi

from skillsft.pipeline.formats.record_stream import array_chunks
from skillsft.pipeline.stages.result import StageResult
from skillsft.pipeline.stages.shards import ShardFile, merge_files
from skillsft.pipeline.teacher.base import BatchStats
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask


def read_shards(stage_task: StageTask) -> tuple[list[ShardFile], str, list[dict[str, Any]]]:
    """The shard files in shard order (opened lazily), the input's name, and each shard's
    teacher usage."""
    files, usage, source = [], [], ""
    for target in luigi.task.flatten(stage_task.input()):
        part = ShardFile.open(Path(target.path))
        files.append(part)
        source = part.head["source"]
        manifest = target.read_manifest()
        usage.extend(manifest.teacher if manifest else [])
    return files, source, usage


def merged_usage(usage: list[dict[str, Any]]) -> list[BatchStats]:
    """The shards' teacher usage as one batch's, as an unsharded stage reports it."""
    if not usage:
        return []
    total = BatchStats.model_validate(usage[0])
    for part in usage[1:]:
        total.absorb(BatchStats.model_validate(part))
    return [total]


def merge_shards(task: StageTask, rejects_name: str) -> StageOutput:
    """The stage's output from its shards' files: what the unsharded stage writes."""
    parts, source, usage = read_shards(task)
    merged = merge_files(parts)
    # The records stream from the shards' files into the output; the result holds none (the
    # failure rule reads only its counters).
    result: StageResult[Any] = StageResult(
        [], [Reject.model_validate(r) for r in merged.rejects], merged.counts,
        unit="trajectories", teacher=merged_usage(usage))
    return StageOutput.of(result, array_chunks(merged.items), input_name=source,
                          rejects_name=rejects_name)


