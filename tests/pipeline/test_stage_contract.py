"""The one stage contract: every stage function has the argument order
(inputs, spec, options[, teacher][, extras]) and returns a `StageResult` whose fixed counters
(`inputs`, `outputs`, `rejected`) the failure rule reads; one loader turns every kind of bad
record into a reject with its reason."""

import inspect
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import EmptyOutput, InputError, TooManyFailures
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_files import (
    CONVERSATIONS,
    MEMORIES,
    TRAJECTORIES,
    LoadedRecords,
    load_records,
)
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.aggregate import aggregate_memories
from skillsft.pipeline.stages.distill import distill
from skillsft.pipeline.stages.flatten import flatten
from skillsft.pipeline.stages.memories import generate_memories
from skillsft.pipeline.stages.outcome import check_outcome, outcome_of
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.stages.preferences import build_preference_pairs, read_episodes
from skillsft.pipeline.stages.result import FIXED_COUNTERS, StageResult
from skillsft.pipeline.stages.skill_bank_io import load_memory_files
from skillsft.pipeline.teacher.base import BatchStats, TeacherResult
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.schemas import Reject

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"
SPEC = get_env("alfworld")
STAGES: dict[str, Callable[..., StageResult[Any]]] = {
    "parse": parse_rollouts,
    "memories": generate_memories,
    "aggregate": aggregate_memories,
    "distill": distill,
    "flatten": flatten,
    "preferences": build_preference_pairs,
}


@cache
def chain() -> dict[str, StageResult[Any]]:
    """Every stage run once, offline, on the alfworld examples, each on the one before."""
    teacher = OfflineTeacher(show_progress=False)
    parsed = parse_rollouts(EXAMPLES / "alfworld", SPEC, SelectionOptions(include_mixed=True),
                            workers=1)
    memories = generate_memories(parsed.records, SPEC, None, teacher)
    aggregated = aggregate_memories(memories.records, SPEC, None, teacher)
    (bank,) = aggregated.records
    distilled = distill(parsed.records, SPEC, None, teacher, bank)
    flat = flatten(distilled.records, SPEC, None)
    groups = read_episodes(SPEC, EXAMPLES / "alfworld").groups
    pairs = build_preference_pairs(groups, SPEC, None, teacher, bank)
    return {"parse": parsed, "memories": memories, "aggregate": aggregated,
            "distill": distilled, "flatten": flat, "preferences": pairs}


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_takes_inputs_spec_options_then_teacher(stage: str) -> None:
    names = list(inspect.signature(STAGES[stage]).parameters)
    assert names[1:3] == ["spec", "options"], names
    if "teacher" in names:
        assert names.index("teacher") == 3, names


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_returns_the_result_with_its_fixed_counters(stage: str) -> None:
    result = chain()[stage]
    assert isinstance(result, StageResult)
    assert set(FIXED_COUNTERS) <= set(result.counts), sorted(result.counts)
    assert result.outputs == len(result.records) > 0
    assert 0 <= result.rejected <= result.inputs
    assert result.inputs > 0 and result.unit
    assert all(isinstance(reject, Reject) for reject in result.rejects)
    assert all(isinstance(stats, BatchStats) for stats in result.teacher)
    # The rule reads the fixed counters: a clean run of the examples passes it.
    check_outcome(outcome_of(result, stage, "examples"), 0.10, "rejects.jsonl")


class HalfFailing(OfflineTeacher):
    """The offline teacher, except that every other request fails as a server error would."""

    def run_batch(self, requests, *, stage):  # type: ignore[no-untyped-def]
        results, stats = super().run_batch(requests, stage=stage)
        return [r if i % 2 else TeacherResult(r.request_id, None, error="http_500")
                for i, r in enumerate(results)], stats


@pytest.mark.parametrize("stage", ["memories", "distill"])
def test_teacher_failures_are_counted_as_rejected_and_the_rule_fails_them(stage: str) -> None:
    parsed, bank = chain()["parse"], chain()["aggregate"].records[0]
    teacher = HalfFailing(show_progress=False)
    if stage == "memories":
        result = generate_memories(parsed.records, SPEC, None, teacher)
    else:
        result = distill(parsed.records, SPEC, None, teacher, bank)
    assert result.rejected > 0 and result.rejected == len(result.rejects)
    assert result.inputs == result.outputs + result.rejected
    with pytest.raises(TooManyFailures, match=f"{result.rejected} of {result.inputs} "):
        check_outcome(outcome_of(result, stage, "in.json"), 0.10, "r.jsonl")


def test_loader_rejects_join_the_result_as_failed_inputs() -> None:
    result: StageResult[int] = StageResult([1, 2], counts={"inputs": 2, "outputs": 2,
                                                           "rejected": 0, "x": 1})
    bad = [Reject(stage="s", file="f", reason="invalid_record")] * 3
    result.absorb_load(LoadedRecords([], bad, {"records_read": 5, "rejected_invalid_record": 3}))
    assert (result.inputs, result.outputs, result.rejected) == (5, 2, 3)
    assert result.rejects == bad and result.counts["x"] == 1
    with pytest.raises(TooManyFailures, match="3 of 5 items failed"):
        check_outcome(outcome_of(result, "s", "f"), 0.5, "r")
    empty: StageResult[int] = StageResult([], unit="memory records")
    empty.absorb_load(LoadedRecords([], bad))
    with pytest.raises(EmptyOutput, match="produced no record from 3 memory records"):
        check_outcome(outcome_of(empty, "aggregate", "m.json"), 1.0, "r")


# -- the one loader -----------------------------------------------------------------------------


@cache
def good() -> dict[str, list[Any]]:
    results = chain()
    return {
        "trajectories": json.loads(jsonio.dumps(results["parse"].records[:3])),
        "memories": json.loads(jsonio.dumps(results["memories"].records[:3])),
        "conversations": json.loads(jsonio.dumps(results["distill"].records[:3])),
    }


def other_env(memory: dict[str, Any]) -> dict[str, Any]:
    return {**memory, "tags": {**memory["tags"], "environment": "WebShop"}}


# (file kind, how one record is broken, the reason its reject carries)
BROKEN = [
    ("trajectories", lambda r: {**r, "trajectories": "not a list"}, "invalid_record"),
    ("trajectories", lambda r: {k: v for k, v in r.items() if k != "task"}, "invalid_record"),
    ("memories", lambda r: {**r, "tags": {}}, "invalid_memory"),
    ("memories", other_env, "other_environment"),
    ("conversations", lambda r: {**r, "conversations": [{"from": "robot"}]},
     "invalid_conversation"),
    ("conversations", lambda r: {"system": r["system"]}, "invalid_conversation"),
]


def load(kind: str, path: Path) -> Any:
    if kind == "memories":
        return load_memory_files([path], SPEC)
    return load_records(path, {"trajectories": TRAJECTORIES,
                               "conversations": CONVERSATIONS}[kind], "stage")


@pytest.mark.parametrize(("kind", "breaks", "reason"), BROKEN)
def test_each_kind_of_bad_record_becomes_a_reject_with_its_reason(
    tmp_path: Path, kind: str, breaks: Callable[[Any], Any], reason: str
) -> None:
    records = list(good()[kind])
    records[1] = breaks(records[1])
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(records))
    loaded = load(kind, path)
    assert len(loaded.records) == len(records) - 1
    (reject,) = loaded.rejects
    assert (reject.reason, reject.file) == (reason, str(path))
    assert reject.detail.startswith("record 1 (env ")
    assert loaded.counts[f"rejected_{reason}"] == 1 and loaded.counts["records_read"] == 3


def test_a_repeated_memory_is_used_once_and_not_a_reject(tmp_path: Path) -> None:
    memories = good()["memories"]
    path = tmp_path / "m.json"
    path.write_text(json.dumps([*memories, memories[0]]))
    loaded = load_records(path, MEMORIES, "aggregate")
    assert len(loaded.records) == len(memories) and loaded.rejects == []
    assert loaded.counts["duplicate_memory_id"] == 1


@pytest.mark.parametrize("kind", ["trajectories", "memories", "conversations"])
def test_a_file_that_is_not_a_list_names_the_file_and_the_format(tmp_path: Path,
                                                                  kind: str) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(InputError, match=r"x\.json: expected a JSON list of .*docs/formats\.md"):
        load(kind, path)


def test_a_file_of_another_kind_says_which_command_it_belongs_to(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(good()["trajectories"]))
    with pytest.raises(InputError, match="wrong kind of file: it holds processed trajectories"):
        load_records(path, CONVERSATIONS, "flatten")
