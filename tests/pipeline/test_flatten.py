"""Alpaca records (FORMATS.md 8), byte for byte, and the post-checks on whole conversations."""

from collections import Counter
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.conversations import TextTurn, split_actions
from skillsft.pipeline.formats.postchecks import (
    admissible_action,
    apply_postchecks,
    bare_buy_now,
    invented_action,
    navigation_back,
)
from skillsft.pipeline.stages.flatten import FlattenOptions, flatten
from skillsft.schemas.conversation import Conversation

ALFWORLD = get_env("alfworld")
SEARCH = get_env("search")
WEBSHOP = get_env("webshop")

TAIL = (
    "\n\nNow it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)


def conversation(system: str, pairs: list[tuple[str, str]]) -> Conversation:
    turns = []
    for human, gpt in pairs:
        turns += [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}]
    return Conversation.model_validate({
        "system": system, "conversations": turns,
        "extra_info": {"task": "t", "task_type": "clean", "num_steps": len(pairs),
                       "source": "offline", "env_id": "env001"},
    })


ALF_SYSTEM = "You are an expert agent operating in the ALFRED Embodied Environment.\n" \
             "Your task is to: put a mug in shelf\n\nBLOCK"
ALF_HUMANS = [
    "Your current observation is: Room.\n"
    "Your admissible actions of the current situation are: [go to desk 1, look]." + TAIL,
    "[Observation 1: 'Room.', Action 1: 'go to desk 1']\n"
    "You are now at step 2 and your current observation is: Desk.\n"
    "Your admissible actions of the current situation are: [take mug 1 from desk 1, look]."
    + TAIL,
    "[Observation 1: 'Room.', Action 1: 'go to desk 1']\n"
    "[Observation 2: 'Desk.', Action 2: 'fly away']\n"
    "You are now at step 3 and your current observation is: Nothing happens.\n"
    "Your admissible actions of the current situation are: [done, look]." + TAIL,
]
ALF_CONVERSATION = conversation(ALF_SYSTEM, [
    (ALF_HUMANS[0], "<think>a</think>\n<action>go to desk 1</action>"),
    (ALF_HUMANS[1], "<think>b</think>\n<action>fly away</action>"),
    (ALF_HUMANS[2], "<think>c</think>\n<action>done</action>"),
])


def test_alfworld_alpaca_layout_and_admissible_filter() -> None:
    result = flatten([ALF_CONVERSATION], ALFWORLD)
    assert result.counts["dropped_action_not_admissible"] == 1
    first, last = result.records  # "fly away" was not offered: dropped; `done` was: kept
    assert first.instruction == ALF_SYSTEM + "\n\n## Current Progress\n" + ALF_HUMANS[0]
    assert first.output == "<think>a</think>\n<action>go to desk 1</action>"
    assert last.instruction == (
        ALF_SYSTEM + "\n\n## Current Progress\n\n"
        "Prior to this step, you have already taken 2 step(s). Below are the most recent 2 "
        "observations and the corresponding actions you took: "
        "[Observation 1: 'Room.', Action 1: 'go to desk 1']\n"
        "[Observation 2: 'Desk.', Action 2: 'fly away']\n"
        "You are now at step 3 and your current observation is: Nothing happens.\n"
        "Your admissible actions of the current situation are: [done, look]." + TAIL
    )
    assert last.output == "<think>c</think>\n<action>done</action>"


def test_window_is_read_from_a_conversation_with_a_full_window() -> None:
    humans = [
        ALF_HUMANS[0],
        "[Observation 1: 'Room.', Action 1: 'go to desk 1']\n"
        "You are now at step 2 and your current observation is: Desk.\n"
        "Your admissible actions of the current situation are: [look]." + TAIL,
        "[Observation 1: 'Desk.', Action 1: 'look']\n"
        "You are now at step 3 and your current observation is: Desk.\n"
        "Your admissible actions of the current situation are: [look]." + TAIL,
    ]
    conv = conversation(ALF_SYSTEM, [
        (humans[0], "<think>a</think>\n<action>go to desk 1</action>"),
        (humans[1], "<think>b</think>\n<action>look</action>"),
        (humans[2], "<think>c</think>\n<action>look</action>"),
    ])
    result = flatten([conv], ALFWORLD)
    assert result.rejects == []
    assert result.records[2].instruction.endswith(
        "Below are the most recent 1 observations and the corresponding actions you took: "
        + humans[2]
    )


def test_unreadable_conversation_is_rejected_and_counted() -> None:
    bad = conversation(ALF_SYSTEM, [("hello", "<think>a</think>\n<action>look</action>")])
    result = flatten([bad, ALF_CONVERSATION], ALFWORLD)
    assert result.counts["dropped_unreadable_conversation"] == 1
    assert len(result.records) == 2
    # The second conversation's "fly away" turn is a post-check drop, listed after it.
    reject, dropped = result.rejects
    assert reject.reason == "unreadable_conversation" and "env001 (item 0)" in reject.detail
    assert dropped.reason == "action_not_admissible"


def test_post_check_drops_are_listed_with_trajectory_turn_and_action() -> None:
    result = flatten([ALF_CONVERSATION], ALFWORLD, FlattenOptions(input_name="d.json"))
    assert result.counts["dropped_action_not_admissible"] == 1
    (drop,) = result.rejects
    assert (drop.stage, drop.file, drop.reason) == ("flatten", "d.json", "action_not_admissible")
    assert (drop.trajectory, drop.step, drop.action) == ("env001", "turn 1", "fly away")


def test_search_records_always_take_the_turn_zero_form() -> None:
    humans = ["Q0", "Q1 with History:\nStep 0: <search>x</search>\n\n"]
    conv = conversation("You are a helpful and harmless assistant.", [
        (humans[0], "<think>a</think>\n<search>x</search>"),
        (humans[1], "<think>b</think>\n<answer>y</answer>"),
    ])
    result = flatten([conv], SEARCH)
    assert [r.instruction for r in result.records] == [
        "You are a helpful and harmless assistant.\n\n## Current Progress\n" + h for h in humans
    ]
    assert result.records[1].output == "<think>b</think>\n<answer>y</answer>"


def turn(obs: str, action: str, adm: tuple[str, ...] = (), thought: str = "") -> TextTurn:
    return TextTurn(observation=obs, admissible=adm, action=action, thought=thought)


def test_admissible_filter_keeps_synthetic_done_only_when_offered() -> None:
    counts: Counter[str] = Counter()
    turns = [turn("o", "done", ("look", "done")), turn("o", "done", ("look",))]
    out = apply_postchecks(turns, [admissible_action], counts)
    assert [t.emit for t in out] == [True, False]
    assert counts == {"dropped_action_not_admissible": 1}


def test_webshop_buy_now_rewrite_and_invented_action_drop() -> None:
    counts: Counter[str] = Counter()
    turns = [turn("p", "buy now"), turn("p", "check price"), turn("p", "search[a, b]")]
    out = apply_postchecks(turns, [bare_buy_now, invented_action], counts)
    assert [(t.action, t.emit) for t in out] == [
        ("click[buy now]", True), ("check price", False), ("search[a, b]", True)
    ]
    assert counts == {"rewritten_bare_buy_now": 1, "dropped_invented_action": 1}


def test_navigation_back_is_inserted_after_a_detail_page() -> None:
    counts: Counter[str] = Counter()
    turns = [
        turn("item page", "click[description]", ("click[description]", "click[buy now]"), "t0"),
        turn("description text", "click[buy now]", ("click[< prev]",), "t1"),
        turn("item page", "click[features]", (), "t2"),
        turn("features text", "click[< prev]", (), "t3"),
    ]
    out = apply_postchecks(turns, [navigation_back], counts)
    assert [(t.observation, t.action) for t in out] == [
        ("item page", "click[description]"),
        ("description text", "click[< prev]"),
        ("item page", "click[buy now]"),
        ("item page", "click[features]"),
        ("features text", "click[< prev]"),
    ]
    assert out[2].admissible == ("click[description]", "click[buy now]") and out[2].thought == "t1"
    assert "description" in out[1].thought and out[1].admissible == ("click[< prev]",)
    assert counts == {"inserted_navigation_back": 1}


def test_webshop_flatten_renders_the_inserted_turn_into_later_histories() -> None:
    system = "You are an expert autonomous agent operating in the WebShop e-commerce " \
             "environment.\nYour task is to: t\n\nB"
    humans = [
        "Your current observation is: item\n"
        "Your admissible actions of the current situation are: "
        "[click[description], click[buy now]]." + TAIL,
        "[Observation 1: 'item', Action 1: 'click[description]']\n"
        "You are now at step 2 and your current observation is: desc\n"
        "Your admissible actions of the current situation are: [click[< prev]]." + TAIL,
    ]
    conv = conversation(system, [
        (humans[0], "<think>a</think>\n<action>click[description]</action>"),
        (humans[1], "<think>b</think>\n<action>buy now</action>"),
    ])
    result = flatten([conv], WEBSHOP)
    assert result.counts["inserted_navigation_back"] == 1
    assert result.counts["rewritten_bare_buy_now"] == 1
    assert [r.output.split("<action>")[1] for r in result.records] == [
        "click[description]</action>", "click[< prev]</action>", "click[buy now]</action>"
    ]
    assert result.records[2].instruction == (
        system + "\n\n## Current Progress\n\n"
        "Prior to this step, you have already taken 2 step(s). Below are the most recent 2 "
        "observations and the corresponding actions you took: "
        "[Observation 1: 'item', Action 1: 'click[description]']\n"
        "[Observation 2: 'desc', Action 2: 'click[< prev]']\n"
        "You are now at step 3 and your current observation is: item\n"
        "Your admissible actions of the current situation are: "
        "[click[description], click[buy now]]." + TAIL
    )


def test_real_alfworld_sample_round_trips_through_distill_and_flatten() -> None:
    from skillsft.pipeline.stages.distill import distill
    from skillsft.pipeline.stages.parse import parse_rollouts
    from skillsft.pipeline.teacher.offline import OfflineTeacher
    from skillsft.schemas.skill_bank import SkillBank

    sample = Path(__file__).resolve().parents[2] / "examples" / "rollouts" / "alfworld"
    parsed = parse_rollouts(sample, ALFWORLD)
    bank = SkillBank.model_validate({"general_skills": [], "task_specific_skills": {}})
    distilled = distill(parsed.records, ALFWORLD, None, OfflineTeacher(show_progress=False), bank)
    result = flatten(distilled.records, ALFWORLD)
    assert distilled.records
    dropped = result.counts.get("dropped_action_not_admissible", 0)
    # Nothing unreadable: the only rejects are the listed post-check drops, one per turn.
    assert [r.reason for r in result.rejects] == ["action_not_admissible"] * dropped
    assert len(result.records) + dropped == distilled.counts["turns"]
    assert all("\n\n## Current Progress\n" in r.instruction for r in result.records)


@pytest.mark.parametrize(("text", "expected"), [
    ("", ()),
    ("look", ("look",)),
    ("go to cabinet 1, take mug 1 from cabinet 1, look",
     ("go to cabinet 1", "take mug 1 from cabinet 1", "look")),
    ("search[red shirt, size large], click[< prev]",
     ("search[red shirt, size large]", "click[< prev]")),
    ("click[a[b, c], d], look", ("click[a[b, c], d]", "look")),  # nested brackets
    ("a], b, c", ("a]", "b", "c")),  # a stray "]" does not open a bracket
    ("a,, b, , c", ("a,", "b", "", "c")),  # separators are taken left to right
    ("click[x, y", ("click[x, y",)),  # an unclosed bracket keeps the rest together
    ("look, ", ("look", "")),
])
def test_split_actions_splits_outside_brackets_only(text: str, expected: tuple[str, ...]) -> None:
    assert split_actions(text) == expected
    assert ", ".join(split_actions(text)) == text  # the list renders back to its text
