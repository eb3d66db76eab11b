"""Lockroom: a toy fourth environment, written the way pipeline/envs/alfworld.py is.

The agent walks between places, picks up a key and unlocks a door. Everything the pipeline
needs about it is in this one module: its categories and classifier, what its actions mean,
what the teacher is told, how its turns render, its post-checks, the signs of its rollout files,
and the rollout parser it uses (the step format ALFWorld and WebShop share). Registering `SPEC`
under its name in `skillsft.pipeline.envs.ENVS` is all that makes `skillsft run lockroom` work
(tests/envs/test_fourth_env.py).
"""

from skillsft.pipeline.envs.action_semantics import ActionRule, ActionSemantics, frozen, rx
from skillsft.pipeline.envs.categories import classify, rules
from skillsft.pipeline.envs.prompt_profiles import PromptProfile, plain_words
from skillsft.pipeline.envs.spec import EnvSpec
from skillsft.pipeline.envs.text_turns import text_layout
from skillsft.pipeline.formats.postchecks import PostCheck, admissible_action
from skillsft.pipeline.formats.rollouts.kinds import STEP_FORMAT

NAME = "lockroom"

RULES = rules(("unlock", r"\bunlock\b"))
LABELS = {"unlock": "Unlock", "fetch": "Fetch"}


def classify_task(goal: str, data_source: str | None = None) -> str:
    return classify(goal, RULES, "fetch")


SEMANTICS = ActionSemantics(
    rules=(
        ActionRule("go", rx(r"^walk to (?P<loc>.+)$"), provides=("at:{loc}",),
                   updates=frozen({"here": "{loc}"}), phrase="Walk to {loc}"),
        ActionRule("pick", rx(r"^pick up (?P<obj>.+)$"), needs=("at:{here}",),
                   provides=("holding:{obj}",), updates=frozen({"held": "{obj}"}),
                   phrase="Pick up {obj}"),
        ActionRule("unlock", rx(r"^unlock (?P<loc>.+?) with (?P<obj>.+)$"),
                   needs=("at:{loc}", "holding:{obj}"), provides=("unlocked:{loc}",),
                   phrase="Unlock {loc} with {obj}"),
    ),
    roles=frozen({"obj": "Object", "held": "Object", "loc": "Location", "here": "Location"}),
    fact_phrases=frozen({"at": "being at {0}", "holding": "holding {0}",
                         "unlocked": "{0} being unlocked"}),
)

PROMPTS = PromptProfile(
    description_form="Lockroom task classified as '<category>' to <goal>. <outcome>.",
    description_rules=("<category> is unlock or fetch.",),
    goal_step="the unlock action",
    refinement_rules=("Drop instance numbers.",),
    pattern_rules=("Use [Object_1] for the key and [Location] for places.",),
    mistake_rules=("Use placeholders, never instance numbers.",),
    placeholders=plain_words({"[Object_1]": "the key", "[Location]": "a place"}),
    example_description="Lockroom task classified as 'unlock' to unlock the door. Solved by "
    "fetching the key first.",
    example_pattern="Search [Location] for [Object_1] -> Acquire [Object_1] -> Unlock",
)

CHECKS: tuple[PostCheck, ...] = (admissible_action,)

LAYOUT = text_layout(
    "You are an expert agent locked in a small house.\nYour task is to: {task}\n\n{block}",
)

SPEC = EnvSpec(
    name=NAME,
    memory_environment_tag="Lockroom",
    categories=tuple(LABELS),
    category_labels=LABELS,
    classify_task=classify_task,
    bank_category_key="task_specific_skills",
    layout=LAYOUT,
    postchecks=CHECKS,
    action_semantics=SEMANTICS,
    rollout_format=STEP_FORMAT,
    title="Lockroom",
    skill_scope="finding a key in a small house and unlocking a door with it",
    dump_signs=(r"-= Lockroom =-",),
    prompts=PROMPTS,
)


def _step(step: str, action: str, reward: float, done: bool, obs: str, actions: list[str]) -> str:
    listed = ",\n ".join(f"'{a}'" for a in actions)
    return (f"Step {step} | Action: {action} | Reward: {reward:.3f} | Done: {done}\n"
            f"Obs: {obs}\n\nYour admissible actions of the current situation are: [{listed}].\n")


def rollout_text(env: int, key_place: str, win: bool) -> str:
    """One episode in the step format: walk, take the key, unlock the door (or give up)."""
    places = ["walk to hall 1", "walk to kitchen 1", "walk to door 1"]
    start = (f"-= Lockroom =-\n\nYou are in a small house. Episode {env}.\n\n"
             "Your task is to: unlock the door 1.")
    steps = [_step("-1", "None", 0.0, False, start, places)]
    steps.append(_step("00", f"walk to {key_place}", 0.0, False,
                       f"You arrive at {key_place}. You see a key 1.",
                       ["pick up key 1", *places]))
    if win:
        steps.append(_step("01", "pick up key 1", 0.0, False, "You pick up the key 1.", places))
        steps.append(_step("02", "walk to door 1", 0.0, False, "You arrive at door 1.",
                           ["unlock door 1 with key 1", *places]))
        steps.append(_step("03", "unlock door 1 with key 1", 10.0, True,
                           "You unlock the door 1.", ["look"]))
    else:
        for number in range(1, 4):
            steps.append(_step(f"{number:02d}", "walk to hall 1", 0.0, number == 3,
                               "You arrive at hall 1.", places))
    return f"=== Trajectory for Test 0, Env {env} ===\n" + "\n".join(steps)
