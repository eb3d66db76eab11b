"""What a sharded stage does in place of its own work: merge its shard tasks' files.

Kept apart from the shard tasks (tasks/shards.py), which subclass the stage tasks: the stages
use this module, so the stage and shard modules do not import each other. Which shard tasks a
stage merges is decided where the graph is composed (skillsft/graph.py).
"""

from pathlib import Path
from typing import Any

import luigi
import orjson

from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.result import StageResult
from skillsft.pipeline.stages.shards import ShardResult, merge_results
from skillsft.pipeline.teacher.base import BatchStats
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask


def read_shards(stage_task: StageTask) -> tuple[list[ShardResult], str, list[dict[str, Any]]]:
    """The shard results in shard order, the input's name, and each shard's teacher usage."""
    results, usage, source = [], [], ""
    for target in luigi.task.flatten(stage_task.input()):
        data = orjson.loads(Path(target.path).read_bytes())
        results.append(ShardResult.from_json(data))
        source = data["source"]
        manifest = target.read_manifest()
        usage.extend(manifest.teacher if manifest else [])
    return results, source, usage


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
    merged = merge_results(parts)
    result: StageResult[Any] = StageResult(
        merged.items, [Reject.model_validate(r) for r in merged.rejects], merged.counts,
        unit="trajectories", teacher=merged_usage(usage))
    return StageOutput.of(result, jsonio.dumps(merged.items), input_name=source,
                          rejects_name=rejects_name)


