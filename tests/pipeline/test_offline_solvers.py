"""The offline teacher's stage-2 answers: causal chaining, placeholders, mistakes."""

import json
import re
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.memories import MemoryContext
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.teacher.offline.causal import analyse, chain_backward
from skillsft.pipeline.teacher.offline.memory import solve_memory
from skillsft.schemas.trajectory import Step, TrajectorySet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"


def _record(task: str, steps: list[tuple[str | None, str]], *, won: bool, env_id: str = "env0",
            admissible: list[str] | None = None) -> TrajectorySet:
    built = []
    for i, (action, obs) in enumerate(steps):
        last = i == len(steps) - 1
        built.append(Step(step_id=f"Step {i - 1:02d}" if i else "Step -1", action=action,
                          observation=obs, admissible_actions=admissible or [],
                          reward=10.0 if last and won else 0.0, done=last))
    return TrajectorySet(env_id=env_id, task=task, type="all_success" if won else "all_fail",
                         trajectories=[built])


def _context(record: TrajectorySet, env: str) -> MemoryContext:
    from skillsft.pipeline.stages.memories import build_context

    return build_context(record, 0, get_env(env))


def test_alfworld_chaining_matches_truth_minimal_actions():
    """Every won sample episode keeps exactly the engine-verified minimal action list."""
    spec = get_env("alfworld")
    truth = json.loads((EXAMPLES / "alfworld" / "truth.json").read_text())
    minimal = {}
    for entry in truth["files"]:
        if entry["won"]:
            minimal.setdefault(entry["env"], []).append(entry["minimal_actions"])
    records = parse_rollouts(EXAMPLES / "alfworld", spec, SelectionOptions(include_mixed=True),
                             workers=1).records
    checked = 0
    for record in records:
        for trajectory in record.trajectories:
            won = [i for i, s in enumerate(trajectory) if s.done and s.reward >= 10]
            if not won:
                continue
            analysed = analyse([(s.action, s.observation) for s in trajectory],
                               spec.action_semantics)
            kept = chain_backward(analysed, won[0], record.task, spec.action_semantics)
            actions = [analysed[i].action for i in kept]
            assert actions in minimal[record.env_id], (record.env_id, actions)
            checked += 1
    assert checked >= 15


def test_alfworld_drops_detours_rejected_actions_and_unneeded_open():
    record = _record("cool some potato and put it in garbagecan", [
        (None, "You are in the middle of a room."),
        ("take potato", "Nothing happens."),
        ("go to countertop 3", "On the countertop 3, you see a potato 1."),
        ("take potato 1 from countertop 3", "You pick up the potato 1 from the countertop 3."),
        ("go to fridge 1", "The fridge 1 is closed."),
        ("open fridge 1", "You open the fridge 1."),
        ("close fridge 1", "You close the fridge 1."),
        ("examine fridge 1", "The fridge 1 is closed."),
        ("cool potato 1 with fridge 1", "You cool the potato 1 using the fridge 1."),
        ("go to garbagecan 1", "You arrive at garbagecan 1."),
        ("move potato 1 to garbagecan 1", "You move the potato 1 to the garbagecan 1."),
    ], won=True)
    answer = solve_memory(_context(record, "alfworld"))
    assert [s.action for s in answer.refined_trajectory] == [
        "go to countertop", "take potato from countertop", "go to fridge",
        "cool potato with fridge", "go to garbagecan", "move potato to garbagecan"]
    assert [s.step_index for s in answer.refined_trajectory] == [1, 2, 3, 7, 8, 9]
    assert answer.planning_pattern == (
        "Go to [Location] -> Take [Object_1] from [Location] -> Go to [Appliance] -> "
        "Cool [Object_1] with [Appliance] -> Go to [Target_Location] -> "
        "Put [Object_1] in/on [Target_Location]")
    assert "holding potato" in answer.refined_trajectory[1].reasoning


def test_alfworld_open_kept_when_a_later_take_needs_it_and_two_objects_chained():
    record = _record("find two pen and put them in drawer", [
        (None, "room"),
        ("go to desk 1", "On the desk 1, you see a pen 1."),
        ("take pen 1 from desk 1", "You pick up the pen 1."),
        ("go to drawer 2", "The drawer 2 is closed."),
        ("open drawer 2", "You open the drawer 2."),
        ("move pen 1 to drawer 2", "You move the pen 1 to the drawer 2."),
        ("go to shelf 1", "On the shelf 1, you see a pen 3."),
        ("take pen 3 from shelf 1", "You pick up the pen 3."),
        ("go to drawer 2", "The drawer 2 is open."),
        ("move pen 3 to drawer 2", "You move the pen 3 to the drawer 2."),
    ], won=True)
    answer = solve_memory(_context(record, "alfworld"))
    assert len(answer.refined_trajectory) == 9  # everything: the first pen counts for the goal
    assert "[Object_1]" in answer.planning_pattern and "[Object_2]" not in answer.planning_pattern
    assert not re.search(r"\w \d", answer.planning_pattern)  # no instance numbers


def test_alfworld_lamp_needs_holding_the_object_where_the_lamp_is():
    record = _record("look at cd under the desklamp", [
        (None, "room"),
        ("go to shelf 1", "On the shelf 1, you see a cd 2."),
        ("take cd 2 from shelf 1", "You pick up the cd 2."),
        ("go to dresser 1", "On the dresser 1, you see a desklamp 1."),
        ("go to bed 1", "On the bed 1, you see nothing."),
        ("inventory", "You are carrying: a cd 2."),
        ("go to dresser 1", "On the dresser 1, you see a desklamp 1."),
        ("use desklamp 1", "You turn on the desklamp 1."),
    ], won=True)
    answer = solve_memory(_context(record, "alfworld"))
    assert [s.step_index for s in answer.refined_trajectory] == [0, 1, 5, 6]
    assert answer.planning_pattern.endswith("Take [Object_1] from [Location] -> Go to [Location] "
                                            "-> Use [Light_Source]")


def test_webshop_keeps_search_product_options_buy():
    record = _record("i need a red shirt with color: red, and size: large, and price lower "
                     "than 30.00 dollars", [
        (None, "WebShop [SEP] Search"),
        ("search[red shirt]", "Back to Search [SEP] B01ABCDEFG [SEP] B09ZZZZZZZ"),
        ("click[b01abcdefg]", "blue shirt"),
        ("click[< prev]", "results"),
        ("click[b09zzzzzzz]", "red shirt [SEP] size [SEP] large [SEP] color [SEP] red"),
        ("click[description]", "a shirt"),
        ("click[< prev]", "red shirt page"),
        ("click[large]", "selected large"),
        ("click[red]", "selected red"),
        ("click[buy now]", "Thank you for shopping"),
    ], won=True)
    answer = solve_memory(_context(record, "webshop"))
    assert [s.step_index for s in answer.refined_trajectory] == [0, 3, 6, 7, 8]
    assert [s.action for s in answer.refined_trajectory][1:] == [
        "click[[Product]]", "click[[Size]]", "click[[Color]]", "click[buy now]"]
    assert answer.planning_pattern == (
        "Search for [Product_Query] -> Open [Product] -> Select [Size] -> Select [Color] -> "
        "Click Buy Now")


def test_search_keeps_only_queries_whose_information_holds_the_answer():
    from skillsft.schemas.trajectory import SearchStep, SearchTrajectorySet

    steps = [SearchStep(step_id="Step 0", action="<search>capital of France</search>",
                        observation="Doc: France is a country in Europe."),
             SearchStep(step_id="Step 1", action="<search>French capital city</search>",
                        observation="Doc: Paris is the capital of France."),
             SearchStep(step_id="Step 2", action="<search>Eiffel tower height</search>",
                        observation="Doc: the tower is 330 m tall."),
             SearchStep(step_id="Step 3", action="<answer>Paris</answer>", observation="")]
    record = SearchTrajectorySet(env_id="q1", task="what is the capital of france?",
                                 type="all_success", data_source="nq", outcome="Success",
                                 reward=1.0, trajectories=[steps])
    from skillsft.pipeline.stages.memories import build_context

    answer = solve_memory(build_context(record, 0, get_env("search")))
    assert [s.step_index for s in answer.refined_trajectory] == [1, 3]
    assert answer.planning_pattern == "Search [Entity_1] -> Synthesize [Answer]"


def test_failure_mistakes_name_rejected_actions_repeats_and_the_step_limit():
    steps = [(None, "room")]
    steps += [("go to cabinet 1", "The cabinet 1 is closed."), ("heat mug 1 with cabinet 1",
              "Nothing happens.")] * 3
    record = _record("heat some mug and put it in cabinet", steps, won=False)
    answer = solve_memory(_context(record, "alfworld"))
    text = json.dumps([m.model_dump() for m in answer.mistakes_to_avoid])
    assert "Nothing happens." in text and "heat [Object_1] with [Location]" in text
    assert "Repeating the identical action 'go to [Location]' (3 times" in text
    assert "step budget" in text
    assert answer.refined_trajectory is None and answer.planning_pattern is None
    assert not re.search(r"\b(mug|cabinet) \d", text)


def test_failure_without_any_signal_still_gets_one_mistake():
    record = TrajectorySet(env_id="e", task="put a mug in cabinet", type="all_fail",
                           trajectories=[[Step(step_id="Step -1", action=None, observation="r"),
                                          Step(step_id="Step 00", action="look",
                                               observation="room")]])
    answer = solve_memory(_context(record, "alfworld"))
    assert len(answer.mistakes_to_avoid) == 1
    assert "not yet achieved" in answer.mistakes_to_avoid[0].trigger_condition


@pytest.mark.parametrize("env", ["alfworld", "webshop", "search"])
def test_solver_is_deterministic_on_the_examples(env):
    spec = get_env(env)
    records = parse_rollouts(EXAMPLES / env, spec, SelectionOptions(include_mixed=True),
                             workers=1).records
    from skillsft.pipeline.stages.memories import build_context

    assert records
    for record in records:
        ctx = build_context(record, 0, spec)
        assert solve_memory(ctx) == solve_memory(ctx)


# -- the three rule errors of issue 11 ---------------------------------------------------------


def test_alfworld_lamp_switched_on_before_the_pick_up_stays_in_the_refined_trajectory():
    record = _record("look at bowl under the desklamp", [
        (None, "You are in the middle of a room."),
        ("go to desk 1", "On the desk 1, you see a desklamp 1 and a pen 1."),
        ("use desklamp 1", "You turn on the desklamp 1."),
        ("go to shelf 1", "On the shelf 1, you see a bowl 1."),
        ("go to bed 1", "On the bed 1, you see a pillow 1."),
        ("go to shelf 1", "On the shelf 1, you see a bowl 1."),
        ("take bowl 1 from shelf 1", "You pick up the bowl 1 from the shelf 1."),
        ("go to desk 1", "On the desk 1, you see a desklamp 1 and a pen 1."),
    ], won=True)
    answer = solve_memory(_context(record, "alfworld"))
    assert [s.action for s in answer.refined_trajectory] == [
        "go to desk", "use desklamp", "go to shelf", "take bowl from shelf", "go to desk"]
    assert [s.step_index for s in answer.refined_trajectory] == [0, 1, 4, 5, 6]


def test_webshop_wrong_purchase_is_a_wrong_choice_not_a_spent_step_budget():
    record = _record("i need a red shirt with color: red, and size: large, and price lower "
                     "than 30.00 dollars", [
        (None, "WebShop [SEP] Search"),
        ("search[red shirt]", "Back to Search [SEP] B01ABCDEFG [SEP] Blue shirt"),
        ("click[b01abcdefg]", "blue shirt [SEP] size [SEP] small"),
        ("click[buy now]", "Thank you for shopping with us! Your score: 0.25"),
    ], won=False)
    ctx = _context(record, "webshop")
    assert not ctx.ended_by_limit
    answer = solve_memory(ctx)
    text = json.dumps([m.model_dump() for m in answer.mistakes_to_avoid])
    assert "do not match every requirement" in text
    assert "step budget" not in text and "step budget" not in answer.contextual_description


def test_search_refinement_keeps_the_search_that_found_the_bridge_entity():
    from skillsft.pipeline.stages.memories import build_context
    from skillsft.schemas.trajectory import SearchStep, SearchTrajectorySet

    steps = [
        SearchStep(step_id="Step 0", action="<search>director of Film X</search>",
                   observation="Doc: Film X (1999) was directed by Jane Bridgewater."),
        SearchStep(step_id="Step 1", action="<search>Film X box office</search>",
                   observation="Doc: Film X earned 3 million."),
        SearchStep(step_id="Step 2", action="<search>Jane Bridgewater birthplace</search>",
                   observation="Doc: Jane Bridgewater was born in Oslo, Norway."),
        SearchStep(step_id="Step 3", action="<answer>Oslo</answer>", observation=""),
    ]
    record = SearchTrajectorySet(env_id="q2", task="where was the director of film x born?",
                                 type="all_success", data_source="hotpotqa", outcome="Success",
                                 reward=1.0, trajectories=[steps])
    answer = solve_memory(build_context(record, 0, get_env("search")))
    assert [s.step_index for s in answer.refined_trajectory] == [0, 2, 3]
    assert answer.planning_pattern == ("Search [Entity_1] -> Search [Entity_2] -> "
                                       "Synthesize [Answer]")
