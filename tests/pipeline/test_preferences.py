"""Anchor states and preference pairs on hand-made episodes (issue 14), in process.

Prompts are checked against what stage 3 + stage 4 really produce for the winning episode
(`distill` then `flatten` on the same steps), never against a re-rendering of our own.
"""

from collections.abc import Callable
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import RolloutDirError
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.anchors import INITIAL, find_anchors
from skillsft.pipeline.stages.distill import distill
from skillsft.pipeline.stages.flatten import flatten
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.stages.preferences import build_preference_pairs, read_episodes
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.schemas import Skill, SkillBank, TrajectorySet
from tests.conftest import render_episode

TASK = "put a pen in drawer"
ROOM = "You are in a room."
DESK = "On the desk 1, you see a pen 1."
SHELF = "On the shelf 1, you see nothing."
LOOP_ONLY = "A LOOPSTATE room."
START = ["go to desk 1", "go to shelf 1", "look"]
AT_DESK = ["take pen 1 from desk 1", "go to shelf 1", "look"]
AT_DESK_OTHER = ["examine desk 1", "take pen 1 from desk 1", "go to shelf 1", "look"]
AT_SHELF = ["go to desk 1", "look", "inventory"]

BANK = SkillBank(
    general_skills=[Skill(skill_id="gen_001", title="Look Before Leaving",
                          principle="Check the surface you are at first")],
    task_specific_skills={"pick_and_place": [Skill(
        skill_id="pic_001", title="Carry Then Place", principle="Hold the object, then go",
        when_to_apply="the goal names a destination")]},
)

WON = render_episode(TASK, [
    ("None", 0.0, False, ROOM, START),
    ("go to desk 1", 0.0, False, DESK, AT_DESK),
    ("take pen 1 from desk 1", 0.0, False, "You pick up the pen 1.", ["go to drawer 1", "look"]),
    ("go to drawer 1", 0.0, False, "The drawer 1 is open.", ["put pen 1 in/on drawer 1", "look"]),
    ("put pen 1 in/on drawer 1", 10.0, True, "You put the pen 1 in the drawer 1.", ["look"]),
])
# Lost: same first move, then leaves the desk; its second `look` repeats the first, so stage 1
# removes it as a loop (and with it the only visit of LOOP_ONLY in this episode).
LOST_AFTER_DESK = render_episode(TASK, [
    ("None", 0.0, False, ROOM, START),
    ("go to desk 1", 0.0, False, DESK, AT_DESK),
    ("go to shelf 1", 0.0, False, SHELF, AT_SHELF),
    ("look", 0.0, False, "A dim room.", AT_SHELF),
    ("look", 0.0, False, LOOP_ONLY, AT_SHELF),
    ("inventory", 0.0, True, "You carry nothing.", AT_SHELF),
])
# Lost: the desk shows the same text with another admissible list (not the same state), then
# LOOP_ONLY as a real step.
LOST_OTHER_DESK = render_episode(TASK, [
    ("None", 0.0, False, ROOM, START),
    ("go to desk 1", 0.0, False, DESK, AT_DESK_OTHER),
    ("look", 0.0, False, LOOP_ONLY, AT_SHELF),
    ("inventory", 0.0, True, "You carry nothing.", AT_SHELF),
])


@pytest.fixture
def rollouts(tmp_path: Path, write_env: Callable[..., Path]) -> Path:
    root = tmp_path / "rollouts"
    write_env(root, "env000", {"test0.txt": WON, "test1.txt": LOST_AFTER_DESK,
                               "test2.txt": LOST_OTHER_DESK})
    return root


def groups_of(root: Path, env: str = "alfworld"):
    spec = get_env(env)
    return spec, read_episodes(spec, root)


def test_equal_states_are_anchors_unequal_and_loop_removed_ones_are_not(rollouts: Path) -> None:
    spec, episodes = groups_of(rollouts)
    [group] = episodes.groups
    assert [e.won for e in group.episodes] == [True, False, False]
    assert episodes.counts["loop_steps_removed"] == 1
    anchors = find_anchors(spec.turn_layout(), group)
    assert set(anchors.ids) == {INITIAL, (DESK, tuple(AT_DESK))}
    assert all(LOOP_ONLY not in str(key) for key in anchors.ids)
    assert (DESK, tuple(AT_DESK_OTHER)) not in anchors.ids
    assert anchors.ids[INITIAL] == "env000#a0"


def test_initial_state_is_an_anchor_even_when_its_text_differs(
    tmp_path: Path, write_env: Callable[..., Path]
) -> None:
    other_start = WON.replace(ROOM, "You are in a bright room.", 1)
    write_env(tmp_path, "env001", {"a.txt": other_start, "b.txt": LOST_OTHER_DESK.replace(
        "go to desk 1 |", "go to shelf 1 |", 1)})
    spec, episodes = groups_of(tmp_path)
    result = build_preference_pairs(episodes.groups, spec, None, OfflineTeacher(), BANK)
    [pair] = result.records
    assert pair.metadata.anchor_id == "env001#a0"
    assert (pair.metadata.chosen_action, pair.metadata.rejected_action) == (
        "go to desk 1", "go to shelf 1")


def test_earliest_divergence_gives_one_pair_from_a_win_and_a_loss(rollouts: Path) -> None:
    spec, episodes = groups_of(rollouts)
    result = build_preference_pairs(episodes.groups, spec, None, OfflineTeacher(), BANK)
    [pair] = result.records
    meta = pair.metadata
    # both took `go to desk 1` from the start: the first difference is at the desk
    assert (meta.chosen_trajectory, meta.rejected_trajectory) == ("env000/test0.txt",
                                                                  "env000/test1.txt")
    assert (meta.chosen_action, meta.rejected_action) == ("take pen 1 from desk 1",
                                                          "go to shelf 1")
    assert meta.anchor_id == "env000#a1"
    assert (meta.chosen_step, meta.rejected_step) == ("Step 00", "Step 00")
    # winner: take, go to drawer, put; loser (loop removed): shelf, look, inventory
    assert (meta.chosen_actions_to_end, meta.rejected_actions_to_end) == (3, 3)
    assert pair.chosen.endswith("<action>take pen 1 from desk 1</action>")
    assert pair.rejected.endswith("<action>go to shelf 1</action>")
    assert pair.chosen.startswith("<think>") and pair.rejected.startswith("<think>")
    # test2 shares no anchor with the winner where they act differently
    assert result.counts["skipped_no_divergence"] == 1
    assert result.counts["pairs"] == 1


def test_pair_prompt_is_the_stage4_instruction_for_that_state(rollouts: Path) -> None:
    spec, episodes = groups_of(rollouts)
    [pair] = build_preference_pairs(episodes.groups, spec, None, OfflineTeacher(), BANK).records
    winner = episodes.groups[0].episodes[0]
    record = TrajectorySet(env_id="env000", task=TASK, type="mixed",
                           trajectories=[winner.steps])
    conversations = distill([record], spec, None, OfflineTeacher(), BANK).records
    records = flatten(conversations, spec).records
    assert pair.prompt == records[1].instruction  # turn 1: at the desk
    assert pair.chosen == records[1].output
    assert "Carry Then Place" in pair.prompt  # the category's skill block


def test_duplicates_per_anchor_and_actions_are_dropped(
    tmp_path: Path, write_env: Callable[..., Path]
) -> None:
    # two losers making the same mistake at the same state: one pair, one duplicate
    write_env(tmp_path, "env000", {"a.txt": WON, "b.txt": LOST_AFTER_DESK,
                                   "c.txt": LOST_AFTER_DESK})
    spec, episodes = groups_of(tmp_path)
    result = build_preference_pairs(episodes.groups, spec, None, OfflineTeacher(), BANK)
    assert len(result.records) == 1
    assert result.counts["skipped_duplicate"] == 1
    assert result.counts["episode_pairs"] == 2


def test_an_inadmissible_winning_move_is_skipped_with_a_reason(
    tmp_path: Path, write_env: Callable[..., Path]
) -> None:
    # the winner's move at the divergence is not in the admissible list: stage 4 would drop it
    won = WON.replace("[take pen 1 from desk 1, go to shelf 1, look]", "[go to shelf 1, look]")
    lost = LOST_AFTER_DESK.replace("[take pen 1 from desk 1, go to shelf 1, look]",
                                   "[go to shelf 1, look]")
    write_env(tmp_path, "env000", {"a.txt": won, "b.txt": lost})
    spec, episodes = groups_of(tmp_path)
    result = build_preference_pairs(episodes.groups, spec, None, OfflineTeacher(), BANK)
    assert result.records == []
    assert result.counts["skipped_chosen_dropped_by_postcheck"] == 1
    assert [r.reason for r in result.rejects] == ["chosen_dropped_by_postcheck"]


def test_envs_with_one_outcome_give_no_pair(
    tmp_path: Path, write_env: Callable[..., Path]
) -> None:
    write_env(tmp_path, "env000", {"a.txt": WON, "b.txt": WON})
    spec, episodes = groups_of(tmp_path)
    result = build_preference_pairs(episodes.groups, spec, None, OfflineTeacher(), BANK)
    assert result.records == [] and result.counts["groups_single_outcome"] == 1


def test_bad_files_are_rejects_and_an_empty_folder_is_an_error(
    tmp_path: Path, write_env: Callable[..., Path]
) -> None:
    write_env(tmp_path, "env000", {"a.txt": WON, "b.txt": "not a rollout\n"})
    _, episodes = groups_of(tmp_path)
    assert [r.file for r in episodes.rejects] == ["env000/b.txt"]
    assert episodes.counts["episodes"] == 1
    with pytest.raises(RolloutDirError):
        groups_of(tmp_path / "missing")


SEARCH_WON = """Your question: which magazine came first, arthur's or first for women

History:
Step 0:<search>arthur's magazine founded</search> <information>Arthur's: 1844.</information>
Step 1:<search>first for women founded</search> <information>1989.</information>

Now it's your turn to take an action.
Action 2: <answer>Arthur's Magazine</answer>

Reward: 1.0
"""
SEARCH_LOST = """Your question: which magazine came first, arthur's or first for women

History:
Step 0:<search>arthur's magazine founded</search> <information>Arthur's: 1844.</information>

Now it's your turn to take an action.
Action 1: <answer>First for Women</answer>

Reward: 0.0
"""


def test_search_anchor_is_question_plus_searches_so_far(tmp_path: Path) -> None:
    root = tmp_path / "search" / "hotpotqa"
    root.mkdir(parents=True)
    (root / "q1.txt").write_text(SEARCH_WON)
    (root / "q2.txt").write_text(SEARCH_LOST)
    spec, episodes = groups_of(tmp_path / "search", "search")
    [group] = episodes.groups
    assert len(group.episodes) == 2
    bank = BANK.model_copy(update={"task_specific_skills": None, "query_type_skills": {}})
    result = build_preference_pairs(episodes.groups, spec, None, OfflineTeacher(), bank)
    [pair] = result.records
    assert pair.metadata.chosen_action == "<search>first for women founded</search>"
    assert pair.metadata.rejected_action == "<answer>First for Women</answer>"
    assert pair.rejected.endswith("\n<answer>First for Women</answer>")

    # the prompt is what stage 4 writes for the winner's second turn
    parsed = parse_rollouts(tmp_path / "search", spec, SelectionOptions(failure_ratio=0))
    [record] = parsed.records
    bank = BANK.model_copy(update={"task_specific_skills": None, "query_type_skills": {}})
    records = flatten(distill([record], spec, None, OfflineTeacher(), bank).records, spec).records
    assert pair.prompt == records[1].instruction
    assert pair.chosen == records[1].output
