"""What a sharded stage does in place of its own work: require its shard tasks, merge them.

Kept apart from the shard tasks (tasks/shards.py), which subclass the stage tasks: the stages
use this module, and tasks/shards.py fills `SHARD_TASK_OF` when it is imported (the command
line imports it), so the stage and shard modules do not import each other.
"""

from pathlib import Path
from typing import Any

import luigi
import orjson

from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.shards import ShardResult, merge_results
from skillsft.pipeline.stages.result import StageResult
from skillsft.pipeline.teacher.base import BatchStats
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask

# stage name -> its shard task class (registered by tasks/shards.py)
SHARD_TASK_OF: dict[str, type[StageTask]] = {}




def shard_tasks(stage_task: StageTask) -> list[luigi.Task]:
    """The shard tasks a sharded stage merges (none when it runs unsharded)."""
    shards: int = stage_task.shards  # type: ignore[attr-defined]
    if shards <= 1:
        return []
    if stage_task.stage_name() not in SHARD_TASK_OF:
        raise RuntimeError("sharded stages need their shard tasks: import skillsft.tasks.shards "
                           "before building the graph")
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


