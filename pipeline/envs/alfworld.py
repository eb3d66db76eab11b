"""ALFWorld: the text household environment (ALFRED tasks in TextWorld), as one `EnvSpec`.

Everything that is ALFWorld's own lives here: its task categories and the rules that classify a
goal into one, what its actions need and provide (offline memories), what the teacher is told
about it, how its turns are rendered, the post-checks its records pass, and the signs that tell
its rollout files apart from another environment's.
"""

from skillsft.pipeline.envs.action_semantics import (
    ActionRule,
    ActionSemantics,
    GoalRequirement,
    frozen,
    rx,
)
from skillsft.pipeline.envs.categories import classify, rules
from skillsft.pipeline.envs.prompt_profiles import PromptProfile, plain_words
from skillsft.pipeline.envs.spec import EnvSpec
from skillsft.pipeline.envs.text_turns import text_layout
from skillsft.pipeline.formats.postchecks import PostCheck, admissible_action

# ALFWorld goals come from alfworld's goal library, e.g. "put a hot tomato in sinkbasin",
# "heat some egg and put it in countertop", "look at bowl under the desklamp",
# "examine the pen with the desklamp", "put two cellphone in sofa".
RULES = rules(
    ("look_at_obj_in_light", r"\blook at\b.*\bunder the\b"),
    ("examine", r"\bexamine\b.*\bwith the\b"),
    ("clean", r"\bclean\b"),
    ("heat", r"\b(hot|heat|heated)\b"),
    ("cool", r"\b(cool|cold|cooled)\b"),
)
LABELS = {
    "pick_and_place": "Pick And Place",
    "look_at_obj_in_light": "Look At Object In Light",
    "clean": "Clean",
    "heat": "Heat",
    "cool": "Cool",
    "examine": "Examine",
}


def classify_task(goal: str, data_source: str | None = None) -> str:
    return classify(goal, RULES, "pick_and_place")


_INSTANCE_NUMBER = (rx(r"\s+\d+\b"), "")

SEMANTICS = ActionSemantics(
    rules=(
        ActionRule("go", rx(r"^go to (?P<loc>.+)$"), provides=("at:{loc}",),
                   updates=frozen({"here": "{loc}"}), phrase="Go to {loc}"),
        ActionRule("take", rx(r"^take (?P<obj>.+?) from (?P<loc>.+)$"),
                   needs=("at:{loc}", "open:{loc}"), provides=("holding:{obj}",),
                   updates=frozen({"held": "{obj}"}), phrase="Take {obj} from {loc}"),
        ActionRule("put", rx(r"^(?:move|put) (?P<obj>.+?) (?:to|in|on|in/on) (?P<loc>.+)$"),
                   needs=("at:{loc}", "holding:{obj}", "open:{loc}"),
                   provides=("in:{obj_type}:{loc}",),
                   updates=frozen({"held": ""}), phrase="Put {obj} in/on {loc}"),
        ActionRule("open", rx(r"^open (?P<loc>.+)$"), needs=("at:{loc}",),
                   provides=("open:{loc}",), phrase="Open {loc}"),
        ActionRule("clean", rx(r"^clean (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{tool}", "holding:{obj}"), provides=("clean:{obj}",),
                   phrase="Clean {obj} with {tool}"),
        ActionRule("heat", rx(r"^heat (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{tool}", "holding:{obj}"), provides=("hot:{obj}",),
                   phrase="Heat {obj} with {tool}"),
        ActionRule("cool", rx(r"^cool (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{tool}", "holding:{obj}"), provides=("cold:{obj}",),
                   phrase="Cool {obj} with {tool}"),
        ActionRule("slice", rx(r"^slice (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{here}", "holding:{tool}"), provides=("sliced:{obj}",),
                   phrase="Slice {obj} with {tool}", roles=frozen({"tool": "Tool"})),
        # A lamp stays on: switched on before the pick-up, it still lights the object later.
        ActionRule("use", rx(r"^use (?P<tool>.+)$"), needs=("at:{here}",),
                   provides=("light:on", "lit:{held}"), phrase="Use {tool}",
                   roles=frozen({"tool": "Light_Source"})),
    ),
    no_effect_observations=frozenset({"Nothing happens."}),
    goal_requirements=(
        GoalRequirement(rx(r"\bclean\b"), "clean:{obj}"),
        GoalRequirement(rx(r"\b(hot|heat)\b"), "hot:{obj}"),
        GoalRequirement(rx(r"\b(cool|cold)\b"), "cold:{obj}"),
        GoalRequirement(rx(r"\btwo\b"), "in:{obj_type}:{loc}"),
        # Light tasks: the lamp on, and the object in hand where the lamp is.
        GoalRequirement(rx(r"\b(under|with) the \w*lamp\b"), "light:on"),
        GoalRequirement(rx(r"\b(under|with) the \w*lamp\b"), "holding:{held}"),
    ),
    roles=frozen({"obj": "Object", "held": "Object", "loc": "Location", "here": "Location",
                   "tool": "Appliance"}),
    action_abstractions=(_INSTANCE_NUMBER,),
    fact_phrases=frozen({
        "at": "being at {0}", "holding": "holding {0}", "open": "{0} being open",
        "in": "a {0} already in {1}", "clean": "{0} being clean", "hot": "{0} being hot",
        "cold": "{0} being cool", "sliced": "{0} being sliced", "lit": "{0} under the light",
        "light": "the lamp being switched on",
    }),
)


PROMPTS = PromptProfile(
    description_form=(
        "AlfWorld task classified as '<category>' to <goal without instance numbers>. "
        "<outcome>."
    ),
    description_rules=(
        "<category> is one of the six ALFRED task types: pick_and_place, "
        "look_at_obj_in_light, clean, heat, cool, examine.",
        "<outcome> is 'Solved by <the action sequence in a few words>' for a success and "
        "'Unsolved due to <the root cause>' for a failure.",
        "Write object names without their numbers ('mug', never 'mug 1').",
    ),
    goal_step="the action that completed the task",
    refinement_rules=(
        "Keep object and receptacle names but drop instance numbers ('mug 1' becomes 'mug').",
        "Give every kept step one general sentence of reasoning that would hold in another "
        "room.",
        "Describe a walk to a place that was only being checked as searching for something not "
        "yet found, not as plain navigation.",
    ),
    pattern_rules=(
        "Never use concrete names: objects are [Object_1], [Object_2], places searched are "
        "[Location], fixed destinations and appliances are [Target_Location].",
        "Every interaction with an object is preceded by a search step written as 'Search "
        "[Location] where possibly having [Object_1]', followed by the interaction with a verb "
        "such as Acquire, Use, Heat, Cool, Clean or Place ('Acquire [Object_1]').",
        "Use 'Navigate to [Target_Location]' only for a fixed appliance or destination reached "
        "after the object is in hand.",
        "Objects found at the same place share one search step.",
    ),
    mistake_rules=(
        "Write triggers and bad actions with placeholders such as [Target_Object], [Container] "
        "and [Location]; never an instance number.",
    ),
    placeholders=plain_words({
        "[Object_1]": "the target object", "[Object_2]": "the second object",
        "[Target_Object]": "the target object", "[Location]": "a likely location",
        "[Target_Location]": "the destination", "[Appliance]": "the appliance",
        "[Container]": "the container", "[Light_Source]": "the lamp", "[Tool]": "the tool",
    }),
    example_description=(
        "AlfWorld task classified as 'heat' to put a hot apple in the fridge. Solved by "
        "finding the apple on a countertop, heating it in the microwave and placing it in the "
        "fridge."
    ),
    example_pattern=(
        "Search [Location] where possibly having [Object_1] -> Acquire [Object_1] -> Navigate "
        "to [Target_Location] -> Heat [Object_1] -> Navigate to [Target_Location] -> Place "
        "[Object_1]"
    ),
    offline_success="AlfWorld task classified as '{category}' to {goal}. Solved by {summary}.",
    offline_failure=("AlfWorld task classified as '{category}' to {goal}. Unsolved due to "
                     "{cause}."),
    reflect_rules=(
        "A failure that ran out of steps while searching calls for a skill about where the "
        "object is likely to be, not for a mistake about the step budget alone.",
        "Keep appliance use (fridge, microwave, sink, lamp) in the skills of its task type.",
    ),
)

CHECKS: tuple[PostCheck, ...] = (admissible_action,)

LAYOUT = text_layout(
    "You are an expert agent operating in the ALFRED Embodied Environment.\n"
    "Your task is to: {task}\n\n{block}",
    final_action="done",
)

SPEC = EnvSpec(
    name="alfworld",
    prompts=PROMPTS,
    memory_environment_tag="Alfworld",
    categories=tuple(LABELS),
    category_labels=LABELS,
    classify_task=classify_task,
    bank_category_key="task_specific_skills",
    layout=LAYOUT,
    postchecks=CHECKS,
    action_semantics=SEMANTICS,
    title="ALFWorld",
    skill_scope="acting in a text-based household (ALFRED) environment: finding, taking, "
    "cleaning, heating, cooling, examining and placing objects",
    dump_signs=(
        r"-= Welcome to TextWorld, ALFRED! =-",
        r"(?m)^Step \S+ \| Action: (go to|take|put|open|close|examine|use|heat|cool|clean) ",
    ),
)
