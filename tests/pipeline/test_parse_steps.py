"""The ALFWorld/WebShop step parser, one test per format variant of FORMATS.md section 1."""

import pytest
from conftest import render_episode

from skillsft.pipeline.errors import MalformedRollout
from skillsft.pipeline.formats.rollouts.admissible import split_admissible
from skillsft.pipeline.formats.rollouts.steps import header_starts, parse_step_rollout

INSTRUCTION = (
    "Now it's your turn to take an action. Once you've finished your reasoning, you should "
    "choose an admissible action for current step and present it within <action> </action> tags."
)


def test_single_line_list_banner_task_and_boilerplate_are_separated() -> None:
    text = (
        "=== Trajectory for Test 3, Env 7 ===\n"
        "Step -1 | Action: None | Reward: 0.000 | Done: False\n"
        "Obs: -= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.\n\n"
        "Your task is to: put a clean plate in box.\n\n"
        "Your admissible actions of the current situation are: [go to box 1, help, look].\n\n"
        f"{INSTRUCTION}\n\n"
        "Step 00 | Action: look | Reward: 10.000 | Done: True\nObs: You see a box.\n"
    )
    episode = parse_step_rollout(text)
    assert episode.task == "put a clean plate in box"
    first, last = episode.steps
    assert (first.step_id, first.action) == ("Step -1", None)
    assert first.observation == "You are in the middle of a room."
    assert first.admissible_actions == ["go to box 1", "look"]
    assert (last.step_id, last.action, last.reward, last.done) == ("Step 00", "look", 10.0, True)
    assert last.observation == "You see a box."
    assert episode.succeeded(10.0)


def test_multi_line_quoted_list() -> None:
    text = render_episode("cool a mug", [("None", 0.0, False, "Room.", ["x"])])
    text = (
        text.replace(
            "are: [x].",
            "are: ['go to cabinet 1',\n 'take mug 1 from cabinet 1',\n 'look'].",
        )
        + "Step 00 | Action: look | Reward: 0.000 | Done: True\nObs: ok\n"
    )
    first = parse_step_rollout(text).steps[0]
    assert first.admissible_actions == ["go to cabinet 1", "take mug 1 from cabinet 1", "look"]
    assert first.observation == "Room."


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            "search[red shirt, size large], click[< prev]",
            ["search[red shirt, size large]", "click[< prev]"],
            id="single-line-commas-in-brackets",
        ),
        pytest.param(
            "'search[red shirt, size large]',\n 'click[buy now]'",
            ["search[red shirt, size large]", "click[buy now]"],
            id="quoted-commas-in-brackets",
        ),
        pytest.param("\"click[men's shirt]\", 'look'", ["click[men's shirt]", "look"], id="quotes"),
        pytest.param("", [], id="empty"),
    ],
)
def test_split_admissible(body: str, expected: list[str]) -> None:
    assert split_admissible(body) == expected


def test_writer_metadata_never_leaks_into_observation() -> None:
    text = render_episode(
        "find a pen",
        [
            ("None", 0.0, False, "Room.", ["look"]),
            ("look", 0.0, True, "Nothing happens.", ["look"]),
        ],
    )
    text = text.replace(
        "Done: True\nObs:",
        "Done: True\nRaw Model Output: <think>hmm\nstill thinking</think><action>look</action>\n"
        "Parsed Action: look\nValid Action: False\nObs:",
    )
    step = parse_step_rollout(text).steps[1]
    assert step.metadata == {
        "Raw Model Output": "<think>hmm\nstill thinking</think><action>look</action>",
        "Parsed Action": "look",
        "Valid Action": "False",
    }
    assert step.observation == "Nothing happens."


def test_prompt_prefixes_and_reasoning_instruction_are_stripped() -> None:
    text = (
        "Step -1 | Action: None | Reward: 0.000 | Done: False\n"
        "Obs: Your current observation is: 'Search'\n\nYour task is to: buy socks.\n\n"
        "Your admissible actions of the current situation are: [search[<your query>]].\n\n"
        "Now it's your turn to take an action.\nYou should first reason step-by-step about the "
        "current situation. This reasoning process MUST be enclosed within <think> </think> tags."
        "\nOnce you've finished your reasoning, you should choose an admissible action.\n\n"
        "Step 00 | Action: search[socks, wool] | Reward: 0.000 | Done: True\n"
        "Obs: You are now at step 1 and your current observation is: Back to Search [SEP] Page 1\n"
        "You should first reason step-by-step about it. Use <think> </think> tags. trailing\n"
    )
    episode = parse_step_rollout(text)
    assert episode.task == "buy socks"
    assert episode.steps[0].observation == "'Search'"
    assert episode.steps[0].admissible_actions == ["search[<your query>]"]
    assert episode.steps[1].action == "search[socks, wool]"
    assert episode.steps[1].observation == "Back to Search [SEP] Page 1\ntrailing"


def test_three_digit_step_ids_and_pipes_inside_actions() -> None:
    specs = [("None", 0.0, False, "Room.", ["look"])]
    specs += [("look", 0.0, False, "same", ["look"])] * 100
    specs += [("search[a | b]", 0.0, True, "end", ["look"])]
    steps = parse_step_rollout(render_episode("t", specs)).steps
    assert [s.step_id for s in steps[-3:]] == ["Step 98", "Step 99", "Step 100"]
    assert steps[-1].action == "search[a | b]"


def test_task_keeps_inner_periods_and_loses_only_the_last_one() -> None:
    text = render_episode("find shoes under 50.00 dollars", [("None", 0.0, True, "Room.", ["x"])])
    assert parse_step_rollout(text).task == "find shoes under 50.00 dollars"


def test_observation_without_admissible_list_is_kept_whole() -> None:
    text = (
        "Step -1 | Action: None | Reward: 0.000 | Done: False\nObs: Room.\nYour task is to: go.\n"
        "Step 00 | Action: go | Reward: 10.000 | Done: True\nObs: Line one.\n\n\n\nLine two.\n"
    )
    steps = parse_step_rollout(text).steps
    assert steps[0].admissible_actions == []
    assert steps[1].observation == "Line one.\n\nLine two."


@pytest.mark.parametrize(
    ("text", "reason", "line"),
    [
        pytest.param("just some notes\n", "no_step_header", None, id="header-less"),
        pytest.param(
            "Step -1 | Action: None | Reward: zero | Done: False\nObs: x\n",
            "bad_step_header",
            1,
            id="bad-reward",
        ),
        pytest.param(
            "Step -1 | Action: None | Reward: nan | Done: False\nObs: x\n",
            "bad_step_header",
            1,
            id="nan-reward",
        ),
        pytest.param(
            "Step -1 | Action: None | Reward: inf | Done: True\nObs: x\n",
            "bad_step_header",
            1,
            id="infinite-reward",
        ),
        pytest.param(
            "Step -1 | Action: None | Reward: 0.0 | Done: False\nObs: Room.\nYour task is to: t.\n"
            "Step 00 | Action: go | Reward: 0.0 | Done: False\n",
            "truncated",
            4,
            id="ends-after-header",
        ),
        pytest.param(
            "Step -1 | Action: None | Reward: 0.0 | Done: False\nObs: Room.\nYour task is to: t.\n"
            "Your admissible actions of the current situation are: ['look',\n 'go",
            "truncated",
            4,
            id="cut-inside-list",
        ),
        pytest.param(
            "Step -1 | Action: None | Reward: 0.0 | Done: False\nObs: Room.\nYour task is to: t.\n"
            "Step 00 | Action: go | Reward: 0.0 | Done: False\nObs: ok\n",
            "truncated",
            4,
            id="no-final-done",
        ),
        pytest.param(
            "Step -1 | Action: None | Reward: 0.0 | Done: True\nObs: Room.\n",
            "no_task",
            1,
            id="no-task",
        ),
        pytest.param(
            "Step -1 | Action: None | Reward: 0.0 | Done: False\nobs: lower case\nObs: R.\n"
            "Your task is to: t.\nStep 00 | Action: a | Reward: 0.0 | Done: True\nObs: ok\n",
            "unparseable_step",
            2,
            id="junk-before-obs",
        ),
        pytest.param(
            "preamble\nStep -1 | Action: None | Reward: 0.0 | Done: True\nObs: R.\n",
            "text_before_first_step",
            1,
            id="preamble",
        ),
    ],
)
def test_malformed_files_name_reason_and_line(text: str, reason: str, line: int | None) -> None:
    with pytest.raises(MalformedRollout) as caught:
        parse_step_rollout(text)
    assert (caught.value.reason, caught.value.line) == (reason, line)
    assert caught.value.hint


def test_multi_line_raw_model_output_stays_whole_and_out_of_the_observation() -> None:
    text = (
        "Step -1 | Action: None | Reward: 0.0 | Done: False\nObs: You are in a room.\n\n"
        "Your task is to: put a mug in cabinet.\n\n"
        "Step 00 | Action: go to cabinet 1 | Reward: 10.0 | Done: True\n"
        "Raw Model Output: <think>line one\nNote: line two\n"
        "Obs: fake</think><action>go to cabinet 1</action>\n"
        "Parsed Action: go to cabinet 1\nValid Action: True\n"
        "Obs: You arrive at cabinet 1.\n"
    )
    step = parse_step_rollout(text).steps[1]
    assert step.observation == "You arrive at cabinet 1."
    assert step.metadata == {
        "Raw Model Output": "<think>line one\nNote: line two\n"
        "Obs: fake</think><action>go to cabinet 1</action>",
        "Parsed Action": "go to cabinet 1",
        "Valid Action": "True",
    }


@pytest.mark.parametrize(
    "tail",
    [
        " Now it's your turn to take an action. You should first reason step-by-step about the "
        "current situation. This reasoning process MUST be enclosed within <think> </think> tags.",
        "\nOnce you've finished your reasoning, you should choose an admissible action for "
        "current step and present it within <action> </action> tags.",
    ],
    ids=["same-line", "second-sentence-only"],
)
def test_instruction_paragraph_is_stripped_wherever_it_starts(tail: str) -> None:
    text = (
        "Step -1 | Action: None | Reward: 0.0 | Done: False\nObs: WebShop [SEP] Search\n\n"
        "Your task is to: buy a shirt.\n\n"
        "Step 00 | Action: click[buy now] | Reward: 10.0 | Done: True\n"
        "Obs: Thank you for shopping." + tail + "\n"
    )
    assert parse_step_rollout(text).steps[1].observation == "Thank you for shopping."


def test_step_limit_episode_is_a_failure_not_a_truncated_file() -> None:
    """The agent ran out of steps: the last block is whole (observation and admissible list)
    but not done. Real WebShop dumps end like this; it is a loss, not a file cut off."""
    text = render_episode("buy a lamp", [
        ("None", 0.0, False, "Shop.", ["search[<your query>]"]),
        ("search[lamp]", 0.0, False, "Results.", ["click[b01]"]),
        ("click[b01]", 0.0, False, "A lamp.", ["click[buy now]", "click[< prev]"]),
    ])
    episode = parse_step_rollout(text)
    assert episode.stopped_at_step_limit
    assert not episode.succeeded(10.0)
    assert [s.action for s in episode.steps] == [None, "search[lamp]", "click[b01]"]


@pytest.mark.parametrize("text", [
    "Step -1 | Action: None | Reward: 0.0 | Done: False\nObs: a\nStep 0 | Action: b",
    "=== banner ===\nStep 1 | Action: x\nStep without the mark\n Step 2 | Action: indented\n",
    "Step | Action: the mark begins at the space of 'Step '\nObs: x\n\nStep 3 | Action: y | Z",
    "no header at all\nStep\nStep: | Action:\n",
    "text\nStep 4 | Action: a | Action: twice\nStep 5 | Action: last line, no newline",
])
def test_header_starts_are_the_lines_a_line_by_line_reading_finds(text: str) -> None:
    """The parser jumps from one `\\nStep ` to the next; it must find exactly the lines that
    start with `Step ` and hold ` | Action: `, as reading every line would."""
    offsets, at = [], 0
    for line in text.split("\n"):
        if line.startswith("Step ") and " | Action: " in line:
            offsets.append(at)
        at += len(line) + 1
    assert header_starts(text) == offsets
