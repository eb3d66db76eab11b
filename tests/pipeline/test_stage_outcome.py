"""The rule every stage applies to its result: nothing made, or too much lost, is an error."""

import pytest

from skillsft.pipeline.errors import EmptyOutput, TooManyFailures
from skillsft.pipeline.stages.outcome import StageOutcome, check_outcome
from skillsft.schemas import Reject


def rejects(*reasons: str) -> list[Reject]:
    return [Reject(stage="parse", file=f"f{i}", reason=r) for i, r in enumerate(reasons)]


def test_no_record_from_a_non_empty_input_names_stage_input_and_reasons() -> None:
    outcome = StageOutcome("parse", "dumps/run1", "rollout files", 3, 3, 0,
                           rejects("truncated", "no_task", "truncated"))
    with pytest.raises(EmptyOutput) as caught:
        check_outcome(outcome, 1.0, "w/rejects.jsonl")
    assert str(caught.value) == (
        "parse: dumps/run1: produced no record from 3 rollout files (most common reasons: "
        "truncated x2, no_task x1); see w/rejects.jsonl")


def test_a_reject_rate_over_the_threshold_fails() -> None:
    outcome = StageOutcome("distill", "t.json", "trajectories", 10, 2, 8,
                           rejects("teacher_error", "teacher_error"))
    with pytest.raises(TooManyFailures) as caught:
        check_outcome(outcome, 0.1, "w/distill_rejects.jsonl")
    message = str(caught.value)
    assert "2 of 10 trajectories failed (20%" in message and "teacher_error x2" in message
    assert "\n" not in message
    check_outcome(outcome, 0.2, "w/distill_rejects.jsonl")  # exactly at the threshold: fine


def test_nothing_attempted_is_not_judged_here() -> None:
    check_outcome(StageOutcome("flatten", "d.json", "conversations", 0, 0, 0), 0.1, "r")
