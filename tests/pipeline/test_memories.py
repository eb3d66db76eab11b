"""Stage 2a end to end with the offline teacher: records in, schema-valid memories out."""

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.memories import (
    PROMPT_VERSIONS,
    MemoryOptions,
    generate_memories,
    iter_memories,
)
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.teacher.base import BatchStats, TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.schemas.memory import Memory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"


def _records(env: str) -> list[Any]:
    return parse_rollouts(EXAMPLES / env, get_env(env), SelectionOptions(include_mixed=True),
                          workers=1).records


class FailingTeacher:
    """The offline teacher, except that the named requests fail like a dead endpoint."""

    name = "offline"

    def __init__(self, failing: set[str]):
        self.failing = failing
        self.inner = OfflineTeacher(show_progress=False)

    def run_batch(self, requests: Sequence[TeacherRequest[Any]], *, stage: str):
        results, stats = self.inner.run_batch(requests, stage=stage)
        for i, request in enumerate(requests):
            if request.request_id in self.failing:
                results[i] = TeacherResult(request.request_id, None, error="http_500: boom")
        return results, stats


def test_alfworld_offline_memories_one_per_env_by_default():
    records = _records("alfworld")
    result = generate_memories(records, get_env("alfworld"), None,
                               OfflineTeacher(show_progress=False))
    assert result.rejects == []
    assert len(result.records) == len(records)
    assert [m.origin_env_id for m in result.records] == [r.env_id for r in records]
    for memory in result.records:
        assert re.fullmatch(r"mem_alfworld_[0-9a-f]{8}", memory.memory_id)
        assert memory.tags.environment == "Alfworld"
        category = get_env("alfworld").classify_task(memory.content.task_meta.original_goal, None)
        assert memory.metadata == {"source": "offline", "category": category,
                                   "trajectory_index": 0,
                                   "prompt_version": PROMPT_VERSIONS["memory"]}
        guidelines = memory.content.strategic_guidelines
        if memory.tags.outcome == "Success":
            assert memory.content.refined_trajectory and guidelines.planning_pattern
            assert "[Target_Location]" in guidelines.planning_pattern or \
                "[Light_Source]" in guidelines.planning_pattern
        else:
            assert memory.content.refined_trajectory is None and guidelines.mistakes_to_avoid
        Memory.model_validate_json(jsonio.dumps(memory))  # what we write reads back
    outcomes = {m.tags.outcome for m in result.records}
    assert outcomes == {"Success", "Failure"}
    assert result.counts["memories"] == len(records)


def test_all_trajectories_option_and_byte_identical_reruns():
    records = _records("alfworld")
    spec = get_env("alfworld")
    options = MemoryOptions(all_trajectories=True)
    first = generate_memories(records, spec, options, OfflineTeacher(show_progress=False))
    second = generate_memories(records, spec, options, OfflineTeacher(show_progress=False))
    assert len(first.records) == sum(len(r.trajectories) for r in records)
    assert len({m.memory_id for m in first.records}) == len(first.records)
    assert jsonio.dumps(first.records) == jsonio.dumps(second.records)


@pytest.mark.parametrize("env", ["webshop", "search"])
def test_other_environments_produce_memories_offline(env):
    records = _records(env)
    result = generate_memories(records, get_env(env), None, OfflineTeacher(show_progress=False))
    assert result.rejects == [] and len(result.records) == len(records)
    tag = get_env(env).memory_environment_tag
    assert all(m.tags.environment == tag for m in result.records)
    assert all(m.memory_id.startswith(f"mem_{env}_") for m in result.records)


def test_memory_request_carries_prompt_and_version():
    records = _records("alfworld")[:1]
    seen: list[TeacherRequest[Any]] = []

    class Recorder(FailingTeacher):
        def run_batch(self, requests, *, stage):
            seen.extend(requests)
            return super().run_batch(requests, stage=stage)

    generate_memories(records, get_env("alfworld"), None, Recorder(set()))
    (request,) = seen
    assert request.kind == "memory" and request.prompt_version == PROMPT_VERSIONS["memory"]
    user = request.messages[1]["content"]
    assert f"Goal: {records[0].task}" in user and "Trajectory:" in user


def _many_records(count: int) -> list[dict[str, Any]]:
    base = _records("alfworld")[0].model_dump()
    return [{**base, "env_id": f"env{i:03d}"} for i in range(count)]


def test_a_failed_memory_is_reported_and_the_rest_kept():
    records = _many_records(20)
    result = generate_memories(records, get_env("alfworld"), None, FailingTeacher({"env004#0"}))
    assert len(result.records) == 19
    (failure,) = result.rejects
    assert (failure.trajectory, failure.reason) == ("env004/0", "teacher_error")
    assert "http_500" in failure.detail
    assert result.counts["failed_teacher_error"] == 1
    assert (result.inputs, result.outputs, result.rejected) == (20, 19, 1)


def test_memories_stream_in_input_order_with_rejects_listed_by_phase():
    """Through a teacher with only run_batch (fed in chunks by base.answer_stream): the first
    memory comes out before the input is read to its end, the memories keep the input order,
    and a reject met before the teacher is listed before a teacher failure that came first."""
    records = _many_records(300)
    records[280] = {**records[280], "trajectories": []}
    read = 0

    def source() -> Any:
        nonlocal read
        for record in records:
            read += 1
            yield record

    result, memories = iter_memories(source(), get_env("alfworld"), None,
                                     FailingTeacher({"env003#0"}))
    first = next(memories)
    assert first.origin_env_id == "env000" and read < len(records)
    kept = [first, *memories]
    assert [m.origin_env_id for m in kept] == [
        r["env_id"] for r in records if r["env_id"] not in ("env003", "env280")]
    assert [(r.trajectory, r.reason) for r in result.rejects] == [
        ("env280", "no_trajectories"), ("env003/0", "teacher_error")]
    assert result.extras["reject_order"] == [(1, 280), (2, 3)]
    assert (result.inputs, result.outputs, result.rejected) == (300, 298, 2)


def test_failures_are_counted_not_raised_the_rule_is_applied_once_elsewhere():
    """The stage reports three failures of 20; judging them is `outcome.check_outcome`'s job."""
    records = _many_records(20)
    result = generate_memories(records, get_env("alfworld"), None,
                               FailingTeacher({"env001#0", "env002#0", "env003#0"}))
    assert len(result.records) == 17 and result.rejected == 3 and result.inputs == 20
    assert [r.trajectory for r in result.rejects] == ["env001/0", "env002/0", "env003/0"]
    assert all(isinstance(stats, BatchStats) for stats in result.teacher)


def test_memory_prompt_does_not_grow_with_the_trajectory() -> None:
    """A 2,000-step episode with long observations costs no more prompt than a 100-step one."""
    from skillsft.pipeline.stages.memories import MemoryOptions, build_context, build_memory_request
    from skillsft.schemas.trajectory import Step, TrajectorySet

    def prompt_chars(n_steps: int) -> int:
        steps = [Step(step_id="Step -1", action=None, observation="Room. " * 400)]
        steps += [Step(step_id=f"Step {i:02d}", action=f"go to shelf {i % 7 + 1}",
                       observation="You see things. " * 200, done=i == n_steps - 1)
                  for i in range(n_steps)]
        record = TrajectorySet(env_id="env001", task="put a mug in shelf", type="all_fail",
                               trajectories=[steps])
        request = build_memory_request(build_context(record, 0, get_env("alfworld")),
                                       MemoryOptions())
        return sum(len(m["content"]) for m in request.messages)

    short, long = prompt_chars(100), prompt_chars(2000)
    assert long - short < 100  # only the "(N steps omitted)" count differs
    assert long < 40_000
