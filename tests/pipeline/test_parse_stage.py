"""Stage 1 end to end: the real ALFWorld sample against its ground truth, the bundled samples,
and byte-identical output whatever the worker count."""

import json
from collections import Counter
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_stream import RenderedElement, element_bytes
from skillsft.pipeline.formats.rollouts import kinds
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions, SourceRange
from skillsft.pipeline.formats.rollouts.steps import parse_step_rollout
from skillsft.pipeline.formats.rollouts.text import read_rollout_text
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.schemas import TrajectorySet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"


@pytest.fixture
def alfworld_sample() -> Path:
    """The bundled copy of the real ALFWorld sample, with its truth.json."""
    return EXAMPLES / "alfworld"


def test_every_sample_file_matches_truth(alfworld_sample: Path) -> None:
    truth = json.loads((alfworld_sample / "truth.json").read_text())
    for entry in truth["files"]:
        episode = parse_step_rollout(read_rollout_text(alfworld_sample / entry["file"]))
        assert episode.task == entry["task"], entry["file"]
        assert [s.action for s in episode.steps[1:]] == entry["actions"], entry["file"]
        assert episode.succeeded(10.0) == entry["won"], entry["file"]
        assert episode.steps[0].action is None and episode.steps[0].step_id == "Step -1"
        for step in episode.steps:
            assert "admissible" not in step.observation and "Your task" not in step.observation
            assert "Raw Model Output" not in step.observation
        # the actions outside the list shown with the step before them are exactly the
        # inadmissible ones the engine reported (so the lists were parsed whole and in place)
        outside = [step.action not in before.admissible_actions
                   for before, step in zip(episode.steps[:-1], episode.steps[1:], strict=True)]
        assert sum(outside) == entry["n_inadmissible"], entry["file"]
        kinds = entry["step_kinds"]
        assert all(out for out, kind in zip(outside, kinds, strict=True) if kind == "invalid")
        if entry["raw_model_output"]:
            assert all("Raw Model Output" in s.metadata for s in episode.steps[1:])


def test_sample_env_labels_match_truth(alfworld_sample: Path) -> None:
    truth = json.loads((alfworld_sample / "truth.json").read_text())
    expected = {e["env"]: e["formats_md_default_label"] for e in truth["envs"]}
    result = parse_rollouts(
        alfworld_sample, get_env("alfworld"), SelectionOptions(include_mixed=True), workers=1
    )
    assert {r.env_id: r.type for r in result.records} == expected
    assert result.rejects == []


@pytest.mark.parametrize("env", ["alfworld", "webshop", "search"])
def test_output_bytes_do_not_depend_on_workers(env: str) -> None:
    options = SelectionOptions(include_mixed=True)
    one = parse_rollouts(EXAMPLES / env, get_env(env), options, workers=1)
    two = parse_rollouts(EXAMPLES / env, get_env(env), options, workers=2)
    assert jsonio.dumps(one.records) == jsonio.dumps(two.records)
    assert one.counts == two.counts and one.rejects == two.rejects
    assert one.records


def test_webshop_sample_selection_and_loop_removal() -> None:
    result = parse_rollouts(EXAMPLES / "webshop-handwritten", get_env("webshop"), workers=1)
    assert [(r.env_id, r.type) for r in result.records] == [
        ("env000", "all_success"),
        ("env001", "all_fail"),
        ("env003", "all_success"),
    ]
    assert result.counts["envs_skipped_mixed"] == 1
    assert result.counts["envs_skipped_too_few_files"] == 1
    fail = result.records[1]
    assert all(len(t) < 20 for t in fail.trajectories)  # the 100-step next/prev cycle is trimmed
    assert result.records[0].trajectories[0][-1].action == "click[buy now]"
    assert result.records[0].task.endswith("price lower than 50.00 dollars")


def test_search_sample_sources_and_balance() -> None:
    options = SelectionOptions(
        search_source_ranges=(SourceRange(first=100, last=199, source="popqa"),)
    )
    result = parse_rollouts(EXAMPLES / "search", get_env("search"), options, workers=1)
    kept = {(r.env_id, r.data_source, r.outcome) for r in result.records}
    assert ("batch_b/run_0105", "popqa", "Success") in kept
    assert ("nq/q0002", "nq", "Failure") in kept and ("nq/q0004", "nq", "Failure") not in kept
    record = next(r for r in result.records if r.env_id == "hotpotqa/q0010")
    steps = record.trajectories[0]
    assert [s.action.split(">")[0] for s in steps] == ["<search", "<search", "<answer"]
    assert "<information>" in steps[2].memory_context
    assert (record.type, record.reward) == ("all_success", 1.0)


@pytest.mark.parametrize("sample", ["alfworld", "webshop-handwritten"])
def test_a_carried_record_is_the_one_a_re_read_builds(sample: str) -> None:
    """A worker renders an env's record only when the env is kept for sure (its folder's
    place below its label's quota); otherwise the main process parses the kept files again.
    Both give the bytes the record's model renders, and an env past the quotas costs nothing."""
    spec = get_env("webshop" if sample.startswith("webshop") else "alfworld")
    options = SelectionOptions(include_mixed=True, n_mixed_envs=5)
    groups = kinds.discover_env_folders(EXAMPLES / sample, Counter())
    compared = 0
    for group in groups:
        sure = kinds.parse_env_folder(
            kinds.GroupJob(str(EXAMPLES / sample), group, options, spec.win_reward, 0))
        late = kinds.parse_env_folder(
            kinds.GroupJob(str(EXAMPLES / sample), group, options, spec.win_reward, 10**6))
        if not sure.candidates:
            continue
        carried, = sure.candidates
        unsure, = late.candidates
        assert unsure.record is None and carried.record is not None
        rebuilt = kinds.reread_env_record(unsure, options.max_file_mb)
        assert rebuilt == carried.record
        model = RenderedElement(rebuilt.element, TrajectorySet).model()
        assert element_bytes(model) == rebuilt.element
        assert rebuilt.steps == sum(len(steps) for steps in model.trajectories)
        compared += 1
    assert compared >= 3
