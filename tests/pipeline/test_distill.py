"""Distillation: windows, the one-thought-per-step rule, failures, offline thoughts."""

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.stages.distill import DistillOptions, distill, split_windows
from skillsft.pipeline.teacher.base import BatchStats, TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.schemas.distill_answers import thoughts_answer_model
from skillsft.schemas.skill_bank import SkillBank
from skillsft.schemas.trajectory import Step, TrajectorySet

ALFWORLD = get_env("alfworld")
WEBSHOP = get_env("webshop")


def test_windows_cover_every_step_once_with_overlap_context() -> None:
    windows = split_windows([10] * 7, budget=30, overlap=1)
    owned = [i for w in windows for i in range(w.start, w.stop)]
    assert owned == list(range(7))
    assert [(w.context_start, w.start, w.stop) for w in windows] == [
        (0, 0, 3), (2, 3, 5), (4, 5, 7)
    ]


def test_windows_fit_in_one_when_budget_allows() -> None:
    assert [(w.start, w.stop) for w in split_windows([5, 5, 5], budget=100, overlap=2)] == [(0, 3)]


def test_window_drops_context_before_exceeding_budget_and_keeps_huge_steps() -> None:
    windows = split_windows([10, 10, 50, 10], budget=30, overlap=2)
    assert [(w.context_start, w.start, w.stop) for w in windows] == [
        (0, 0, 2), (2, 2, 3), (3, 3, 4)  # the 50-cost step is too big to be context
    ]


def thoughts(*indices: int) -> dict[str, Any]:
    return {"thoughts": [{"step_index": i, "thought": f"t{i}"} for i in indices]}


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        ((0, 1), "missing step_index [2]"),
        ((0, 1, 2, 3), "unexpected step_index [3]"),
        ((0, 1, 1, 2), "repeated step_index [1]"),
    ],
    ids=["missing", "extra", "repeated"],
)
def test_answer_model_rejects_wrong_step_indices(indices, message) -> None:
    model = thoughts_answer_model((0, 1, 2))
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        model.model_validate(thoughts(*indices))
    assert len(model.model_validate(thoughts(0, 1, 2)).thoughts) == 3


def test_answer_model_rejects_empty_or_tagged_thoughts() -> None:
    model = thoughts_answer_model((0,))
    for bad in ("   ", "ok </think> sneaky"):
        with pytest.raises(ValidationError):
            model.model_validate({"thoughts": [{"step_index": 0, "thought": bad}]})


BANK = SkillBank.model_validate(
    {"general_skills": [{"skill_id": "gen_001", "title": "T", "principle": "P"}],
     "task_specific_skills": {}, "common_mistakes": []}
)


def episode(n_moves: int, win: bool = True) -> list[Step]:
    steps = [Step(step_id="Step -1", action=None, observation="Room.",
                  admissible_actions=["go to desk 1"])]
    for i in range(n_moves):
        last = i == n_moves - 1
        steps.append(Step(step_id=f"Step {i:02d}", action=f"go to desk {i + 1}",
                          observation=f"Desk {i + 1}. " + "x" * 200,
                          admissible_actions=["look"], reward=10.0 if win and last else 0.0,
                          done=last))
    return steps


def records(*episodes: list[Step]) -> list[TrajectorySet]:
    return [TrajectorySet(env_id="env001", task="put a mug in desk", type="all_success",
                          trajectories=list(episodes))]


class ScriptedTeacher:
    """Answers each request with `answer(request)`, validated like a real teacher does."""

    name = "scripted"

    def __init__(self, answer: Callable[[TeacherRequest[Any]], dict[str, Any]]) -> None:
        self.answer = answer
        self.requests: list[TeacherRequest[Any]] = []

    def run_batch(self, requests: Sequence[TeacherRequest[Any]], *, stage: str):
        self.requests.extend(requests)
        results = []
        for request in requests:
            try:
                answer = request.answer_model.model_validate(self.answer(request))
                results.append(TeacherResult(request.request_id, answer))
            except ValidationError as exc:
                results.append(TeacherResult(request.request_id, None, error=str(exc)))
        return results, BatchStats(stage=stage, model="m1")


def test_offline_distill_copies_actions_and_marks_source() -> None:
    result = distill(records(episode(3)), ALFWORLD, None, OfflineTeacher(show_progress=False), BANK)
    (conversation,) = result.records
    gpt = [t.value for t in conversation.conversations if t.from_ == "gpt"]
    actions = [v.split("<action>")[1].removesuffix("</action>") for v in gpt]
    assert actions == ["go to desk 1", "go to desk 2", "go to desk 3", "done"]
    assert all(v.startswith("<think>") and "</think>\n<action>" in v for v in gpt)
    assert "put a mug in desk" in gpt[0]  # the offline thought ties the step to the goal
    assert conversation.extra_info.source == "offline"
    assert conversation.extra_info.num_steps == 4
    assert (result.inputs, result.outputs, result.rejected) == (1, 1, 0)


def test_long_trajectory_is_distilled_in_windows_with_one_thought_per_step() -> None:
    teacher = ScriptedTeacher(lambda r: {"thoughts": [
        {"step_index": s["index"], "thought": f"thought {s['index']}"}
        for s in r.offline_context().steps]})
    options = DistillOptions(context_budget_tokens=400, window_overlap=1)
    result = distill(records(episode(12)), ALFWORLD, options, teacher, BANK)
    assert len(teacher.requests) > 2
    assert result.counts["windowed_trajectories"] == 1
    (conversation,) = result.records
    gpt = [t.value for t in conversation.conversations if t.from_ == "gpt"]
    assert [g.split("</think>")[0] for g in gpt] == [f"<think>thought {i}" for i in range(13)]
    assert conversation.extra_info.source == "scripted:m1"
    later = teacher.requests[1].messages[1]["content"]
    assert "Earlier steps (context only, no thought needed)" in later


def test_wrong_answer_fails_the_trajectory_and_is_reported() -> None:
    teacher = ScriptedTeacher(lambda r: thoughts(0, 1))  # too few thoughts, never padded
    result = distill(records(episode(3), episode(1)), ALFWORLD, None, teacher, BANK)
    assert [c.extra_info.num_steps for c in result.records] == [2]
    assert result.counts["trajectories_failed"] == 1
    assert (result.inputs, result.outputs, result.rejected) == (2, 1, 1)
    (failure,) = result.rejects
    assert failure.reason == "teacher" and "env001/0" in failure.detail
    assert "missing step_index [2, 3]" in failure.detail


def test_failed_episodes_are_skipped_unless_asked() -> None:
    teacher = OfflineTeacher(show_progress=False)
    result = distill(records(episode(2, win=False)), ALFWORLD, None, teacher, BANK)
    assert result.records == [] and result.counts["skipped_failed_trajectory"] == 1
    kept = distill(records(episode(2, win=False)), ALFWORLD, DistillOptions(include_failed=True),
                   teacher, BANK)
    assert [c.extra_info.num_steps for c in kept.records] == [2]  # no synthetic done


def test_webshop_navigation_back_is_inserted_before_the_teacher_writes_thoughts() -> None:
    """After click[description] the agent must go back before buying; the inserted turn and
    the resumed one are both shown to the teacher, so each thought fits its own page."""
    from skillsft.pipeline.stages.flatten import flatten

    page = ["click[< prev]", "click[description]", "click[buy now]"]
    steps = [
        Step(step_id="Step -1", action=None, observation="WebShop [SEP] Search",
             admissible_actions=["search[red shirt]"]),
        Step(step_id="Step 00", action="search[red shirt]", observation="Results [SEP] B01",
             admissible_actions=["click[b01]"]),
        Step(step_id="Step 01", action="click[b01]", observation="Product page of B01",
             admissible_actions=page),
        Step(step_id="Step 02", action="click[description]", observation="Description of B01",
             admissible_actions=["click[< prev]"]),
        Step(step_id="Step 03", action="click[buy now]", observation="Thank you",
             admissible_actions=[], reward=10.0, done=True),
    ]
    record = TrajectorySet(env_id="env001", task="i need a red shirt", type="all_success",
                           trajectories=[steps])
    asked: list[TeacherRequest[Any]] = []

    def answer(request: TeacherRequest[Any]) -> dict[str, Any]:
        asked.append(request)
        indices = request.answer_model.expected_indices
        return {"thoughts": [{"step_index": i, "thought": f"thought {i}"} for i in indices]}

    bank = BANK.model_copy(update={"task_specific_skills": {}})
    result = distill([record], WEBSHOP, None, ScriptedTeacher(answer), bank)
    assert result.counts["inserted_navigation_back"] == 1
    (conversation,) = result.records
    gpt = [t.value for t in conversation.conversations if t.from_ == "gpt"]
    human = [t.value for t in conversation.conversations if t.from_ == "human"]
    assert [g.split("<action>")[1][:-9] for g in gpt] == [
        "search[red shirt]", "click[b01]", "click[description]", "click[< prev]",
        "click[buy now]",
    ]
    assert "current observation is: Description of B01" in human[3]  # back from the detail
    assert "current observation is: Product page of B01" in human[4]  # buy on the product page
    assert all(f"thought {i}" in gpt[i] for i in range(5))  # every thought came from the teacher
    prompt = asked[0].messages[-1]["content"]
    assert prompt.count("Action: click[< prev]") == 1
    # flattening finds nothing left to insert
    assert "inserted_navigation_back" not in flatten([conversation], WEBSHOP).counts
