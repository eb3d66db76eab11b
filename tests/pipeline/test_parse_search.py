"""The Search-QA parser (FORMATS.md section 2)."""

import pytest

from skillsft.pipeline.errors import MalformedRollout
from skillsft.pipeline.formats.rollouts.search import parse_search_rollout

TURN = "Now it's your turn to take an action."


def test_several_history_blocks_use_the_last_and_keep_information() -> None:
    text = (
        "Your question: who wrote hamlet?\n\nHistory:\nStep 0:<search>hamlet</search> "
        f"<information>Doc 1 old</information>\n\n{TURN}\nAction 1: <search>author</search>\n\n"
        "History:\nStep 0:<search>hamlet</search> <information>Doc 1\nspans lines</information>\n"
        f"Step 1:<search>author</search>\n\n{TURN}\nAction 2: <answer>Shakespeare</answer>\n\n"
        "Reward: 1.0\n"
    )
    episode = parse_search_rollout(text)
    assert (episode.question, episode.reward) == ("who wrote hamlet?", 1.0)
    assert [s.step_id for s in episode.steps] == ["Step 0", "Step 1", "Step 2"]
    assert [s.action for s in episode.steps] == [
        "<search>hamlet</search>",
        "<search>author</search>",
        "<answer>Shakespeare</answer>",
    ]
    assert [s.information for s in episode.steps] == ["Doc 1\nspans lines", "", ""]
    assert episode.steps[0].memory_context == ""
    assert episode.steps[2].memory_context == (
        "Step 0: <search>hamlet</search> <information>Doc 1\nspans lines</information>\n"
        "Step 1: <search>author</search>"
    )
    assert [(s.reward, s.done) for s in episode.steps] == [(0.0, False), (0.0, False), (1.0, True)]


def test_one_shot_answer() -> None:
    episode = parse_search_rollout(
        f"Your question: capital of france\n\n{TURN}\nAction 0: <answer>Paris</answer>\n\n"
        "Reward: 0.0\n"
    )
    assert len(episode.steps) == 1
    assert (episode.steps[0].action, episode.steps[0].done) == ("<answer>Paris</answer>", True)
    assert episode.reward == 0.0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("History:\nStep 0:<search>x</search>\n", "no_question", id="no-question"),
        pytest.param(
            "Your question: q\n\nAction 0: <answer>a</answer>\n", "truncated", id="no-reward"
        ),
        pytest.param("Your question: q\n\nReward: 1.0\n", "truncated", id="no-action"),
        pytest.param(
            "Your question: q\nHistory:\nnot a step\nAction 1: <answer>a</answer>\nReward: 1\n",
            "unparseable_step",
            id="junk-history",
        ),
    ],
)
def test_malformed_search_files(text: str, reason: str) -> None:
    with pytest.raises(MalformedRollout) as caught:
        parse_search_rollout(text)
    assert caught.value.reason == reason
