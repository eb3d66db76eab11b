"""Conversation turns, byte for byte (FORMATS.md 7); every expected string is written by hand."""

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.conversations import RenderOptions
from skillsft.schemas.trajectory import SearchStep, Step

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


def step(sid: str, action: str | None, obs: str, adm: list[str], reward=0.0, done=False) -> Step:
    return Step(step_id=sid, action=action, observation=obs, admissible_actions=adm,
                reward=reward, done=done)


def alfworld_steps(win: bool = True) -> list[Step]:
    return [
        step("Step -1", None, "Room.", ["go to desk 1", "look"]),
        step("Step 00", "go to desk 1", "Desk.", ["take mug 1 from desk 1", "look"]),
        step("Step 01", "take mug 1 from desk 1", "Got mug.", ["go to shelf 1", "look"]),
        step("Step 02", "go to shelf 1", "Shelf.", ["put mug 1 in/on shelf 1", "look"]),
        step("Step 03", "put mug 1 in/on shelf 1", "Placed.",
             ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11"],
             reward=10.0 if win else 0.0, done=win),
    ]


def test_alfworld_system_and_turn_zero() -> None:
    layout = ALFWORLD.layout
    assert layout.system("put a mug in shelf", "BLOCK") == (
        "You are an expert agent operating in the ALFRED Embodied Environment.\n"
        "Your task is to: put a mug in shelf\n\nBLOCK"
    )
    drafts = layout.build_turns("put a mug in shelf", "BLOCK", alfworld_steps(), "env0/0",
                                RenderOptions())
    assert drafts[0].human == (
        "Your current observation is: Room.\n"
        "Your admissible actions of the current situation are: [go to desk 1, look]." + TAIL
    )
    assert drafts[0].action == "go to desk 1"  # turn k is answered by step k+1's action


def test_alfworld_turn_k_partial_window() -> None:
    drafts = ALFWORLD.layout.build_turns("t", "B", alfworld_steps(), "env0/0", RenderOptions())
    assert drafts[2].human == (
        "[Observation 1: 'Room.', Action 1: 'go to desk 1']\n"
        "[Observation 2: 'Desk.', Action 2: 'take mug 1 from desk 1']\n"
        "You are now at step 3 and your current observation is: Got mug.\n"
        "Your admissible actions of the current situation are: [go to shelf 1, look]." + TAIL
    )
    assert drafts[2].action == "go to shelf 1"


def test_alfworld_turn_k_full_window_renumbers_from_one() -> None:
    drafts = ALFWORLD.layout.build_turns("t", "B", alfworld_steps(), "env0/0",
                                         RenderOptions(history=2))
    assert drafts[3].human == (
        "[Observation 1: 'Desk.', Action 1: 'take mug 1 from desk 1']\n"
        "[Observation 2: 'Got mug.', Action 2: 'go to shelf 1']\n"
        "You are now at step 4 and your current observation is: Shelf.\n"
        "Your admissible actions of the current situation are: "
        "[put mug 1 in/on shelf 1, look]." + TAIL
    )


def test_alfworld_synthetic_done_turn() -> None:
    drafts = ALFWORLD.layout.build_turns("t", "B", alfworld_steps(), "env0/0",
                                         RenderOptions(history=1))
    assert len(drafts) == 5 and drafts[-1].synthetic and drafts[-1].action == "done"
    final = drafts[-1]
    assert final.observation == "Placed."
    assert final.admissible.count("done") == 1
    others = [a for a in final.admissible if a != "done"]
    assert len(others) == 9 and len(set(others)) == 9
    assert set(others) <= {f"a{i}" for i in range(1, 12)}
    assert final.human == (
        "[Observation 1: 'Shelf.', Action 1: 'put mug 1 in/on shelf 1']\n"
        "You are now at step 5 and your current observation is: Placed.\n"
        "Your admissible actions of the current situation are: ["
        + ", ".join(final.admissible) + "]." + TAIL
    )


def test_synthetic_done_is_seeded_per_record() -> None:
    def final_list(seed: int, trajectory_id: str) -> tuple[str, ...]:
        drafts = ALFWORLD.layout.build_turns("t", "B", alfworld_steps(), trajectory_id,
                                             RenderOptions(seed=seed))
        return drafts[-1].admissible

    assert final_list(0, "env0/0") == final_list(0, "env0/0")
    by_id = {final_list(0, f"env{i}/0") for i in range(8)}
    by_seed = {final_list(s, "env0/0") for s in range(8)}
    assert len(by_id) > 1 and len(by_seed) > 1


def test_no_synthetic_turn_without_a_win_or_for_webshop() -> None:
    lost = ALFWORLD.layout.build_turns("t", "B", alfworld_steps(win=False), "e/0", RenderOptions())
    assert [d.action for d in lost][-1] == "put mug 1 in/on shelf 1"
    shop = WEBSHOP.layout.build_turns("t", "B", alfworld_steps(), "e/0", RenderOptions())
    assert len(shop) == 4 and not any(d.synthetic for d in shop)


def test_webshop_system() -> None:
    assert WEBSHOP.layout.system("i need a red shirt", "BLOCK") == (
        "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
        "Your task is to: i need a red shirt\n\nBLOCK"
    )


def search_steps() -> list[SearchStep]:
    return [
        SearchStep(step_id="Step 0", action="<search>capital of france</search>",
                   observation="Paris is the capital."),
        SearchStep(step_id="Step 1", action="<search>paris population</search>", observation=""),
        SearchStep(step_id="Step 2", action="<answer>Paris</answer>", observation=""),
    ]


SEARCH_TAIL = (
    "You should first reason step-by-step inside <think> </think> tags. Then either issue "
    "another search via <search>...</search> or commit to a final answer via "
    "<answer>...</answer>."
)
SEARCH_HEAD = (
    "You are an expert agent tasked with answering the given question step-by-step.\n"
    "Your question: What is it?\n\nBLOCK\n\n"
)


def test_search_turns_with_information() -> None:
    layout = SEARCH.layout
    assert layout.system("What is it?", "BLOCK") == "You are a helpful and harmless assistant."
    drafts = layout.build_turns("What is it?", "BLOCK", search_steps(), "q1/0", RenderOptions())
    assert drafts[0].human == SEARCH_HEAD + SEARCH_TAIL
    assert drafts[2].human == (
        SEARCH_HEAD
        + "History:\n"
        "Step 0: <search>capital of france</search> <information>Paris is the capital."
        "</information>\n"
        "Step 1: <search>paris population</search>\n\n" + SEARCH_TAIL
    )
    assert [d.action for d in drafts] == [s.action for s in search_steps()]


def test_search_turns_actions_only_layout() -> None:
    drafts = SEARCH.layout.build_turns("What is it?", "BLOCK", search_steps(), "q1/0",
                                       RenderOptions(search_information=False))
    assert drafts[1].human == (
        SEARCH_HEAD + "History:\nStep 0: <search>capital of france</search>\n\n" + SEARCH_TAIL
    )


def test_search_history_keeps_the_rollouts_own_step_numbers() -> None:
    """A file numbering its steps from 1 shows the same numbers the agent saw (memory_context)."""
    steps = [
        SearchStep(step_id="Step 1", action="<search>a</search>", observation="A.",
                   memory_context=""),
        SearchStep(step_id="Step 2", action="<answer>b</answer>", observation="",
                   memory_context="Step 1: <search>a</search> <information>A.</information>"),
    ]
    drafts = SEARCH.layout.build_turns("What is it?", "BLOCK", steps, "q1/0", RenderOptions())
    assert drafts[1].human == (
        SEARCH_HEAD + "History:\n" + steps[1].memory_context + "\n\n" + SEARCH_TAIL
    )


def test_turn_fields_found_by_literal_search_equal_the_regex_fields() -> None:
    """flatten reads a later turn's fields by looking for the literal after `{history}` instead
    of letting the regex grow the history a character at a time: the fields must be the
    regex's, also when that literal appears inside the history or the observation, and a text
    that does not follow the template must still find nothing."""
    from skillsft.pipeline.formats.conversations import match_template, template_pattern

    layout = ALFWORLD.turn_layout()
    groups = {"step": r"\d+", "admissible": ".*"}
    literal = "\nYou are now at step "
    fake = f"{literal}7 and your current observation is: fake"
    texts = [
        layout.later_turn.format(history=history, step=step_number, observation=observation,
                                 admissible=admissible)
        for history in ["", "[Observation 1: 'Room.', Action 1: 'look']", f"h{fake}", fake * 3]
        for observation in ["Desk.", f"o{literal}3 and your", fake]
        for step_number in (2, 12)
        for admissible in ["look", "a, b]. [c", ""]
    ]
    texts += [layout.later_turn, literal, "", texts[0][:-1], texts[5] + "x", "x" + texts[3]]
    pattern = template_pattern(layout.later_turn, groups)
    found = 0
    for text in texts:
        regex = pattern.fullmatch(text)
        assert match_template(layout.later_turn, text, groups) == (
            regex.groupdict() if regex else None)
        found += regex is not None
    assert 0 < found < len(texts)  # both kinds are compared
    # a template without a leading field goes through the regex alone
    output = layout.output.format(thought="t", action="go to desk 1")
    assert match_template(layout.output, output, {"action": ".*"}) == {
        "thought": "t", "action": "go to desk 1"}
