"""One description per environment; the only module that knows environment names.

Stage code receives an `EnvSpec` and never branches on `spec.name`: everything that differs
between ALFWorld, WebShop and Search (rollout format, selection, categories, templates,
post-checks) is a field here. A fourth environment is one more `EnvSpec` in `ENVS`.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from skillsft.pipeline.envs import categories
from skillsft.pipeline.envs.action_semantics import (
    ALFWORLD_SEMANTICS,
    SEARCH_SEMANTICS,
    WEBSHOP_SEMANTICS,
    ActionSemantics,
)
from skillsft.pipeline.envs.postchecks import (
    ALFWORLD_CHECKS,
    WEBSHOP_CHECKS,
    PostCheck,
    navigation_back,
)
from skillsft.pipeline.envs.prompt_profiles import (
    ALFWORLD_PROMPTS,
    SEARCH_PROMPTS,
    WEBSHOP_PROMPTS,
    BankShape,
    PromptProfile,
)
from skillsft.pipeline.formats.conversations import Layout, SearchLayout, TextLayout
from skillsft.pipeline.formats.rollouts.kinds import SEARCH_FORMAT, STEP_FORMAT, RolloutFormat


@dataclass(frozen=True)
class EnvSpec:
    name: str
    # The tag the released memory files use in `tags.environment`.
    memory_environment_tag: str
    categories: tuple[str, ...]
    category_labels: Mapping[str, str]
    classify_task: Callable[[str, str | None], str]
    # Where a skill bank keeps this environment's per-category skills.
    bank_category_key: Literal["task_specific_skills", "query_type_skills"]
    # Stages 3-4 (FORMATS.md 7-8): how conversation turns and alpaca records are rendered, and
    # the checks a turn must pass before it becomes a record (pipeline/envs/postchecks.py).
    layout: Layout | None = None
    postchecks: tuple[PostCheck, ...] = ()
    # Stage 2 (offline memories): what actions need and provide, for causal chaining,
    # placeholders and mistake detection (pipeline/envs/action_semantics.py).
    action_semantics: ActionSemantics | None = None
    # A step with at least this reward and `done` is a win (text environments).
    win_reward: float = 10.0
    # Stage 1 (FORMATS.md 1-2): how rollout files are found, parsed and selected
    # (pipeline/formats/rollouts/kinds.py); a Search episode is a win when its reward >= win_reward.
    rollout_format: RolloutFormat = STEP_FORMAT
    # How users name the environment (messages, the skill document), what an agent is doing
    # when it should load the skill document (pipeline/stages/skill_document.py), and what only its
    # rollout files contain (regular expressions, matched per file): stage 1 tells a dump of
    # another environment by these before any teacher call (pipeline/envs/dump_kind.py).
    title: str = ""
    skill_scope: str = ""
    dump_signs: tuple[str, ...] = ()
    # Stage 2 prompts (pipeline/envs/prompt_profiles.py): what the teacher is told about this
    # environment, and how many entries each section of its skill bank should end with.
    prompts: PromptProfile | None = None
    bank_shape: BankShape = BankShape()

    def __post_init__(self) -> None:
        # A text layout decides wins too (which trajectories are distilled, the done turn):
        # it must agree with the spec that parsing and memories read.
        layout_win = getattr(self.layout, "win_reward", self.win_reward)
        if layout_win != self.win_reward:
            raise ValueError(
                f"{self.name}: layout.win_reward {layout_win} != win_reward {self.win_reward}"
            )

    def turn_layout(self) -> Layout:
        """The layout stages 3-4 render with; an environment without one cannot get there."""
        if self.layout is None:
            raise ValueError(
                f"environment {self.name!r} has no turn layout; add one in pipeline/envs/"
            )
        return self.layout

    def label(self, category: str) -> str:
        return self.category_labels.get(category, category.replace("_", " ").title())


# FORMATS.md 7-8, byte for byte: the layout of the released SkillRL SFT corpus.
_TEXT_TURN_TAIL = (
    "Your admissible actions of the current situation are: [{admissible}].\n\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)
_TEXT_TURNS = dict(
    first_turn="Your current observation is: {observation}\n" + _TEXT_TURN_TAIL,
    later_turn=(
        "{history}\nYou are now at step {step} and your current observation is: {observation}\n"
        + _TEXT_TURN_TAIL
    ),
    history_line="[Observation {i}: '{observation}', Action {i}: '{action}']",
    output="<think>{thought}</think>\n<action>{action}</action>",
    progress_first="\n\n## Current Progress\n",
    progress_later=(
        "\n\n## Current Progress\n\nPrior to this step, you have already taken {k} step(s). "
        "Below are the most recent {n} observations and the corresponding actions you took: "
    ),
)
ALFWORLD_LAYOUT = TextLayout(
    system_template=(
        "You are an expert agent operating in the ALFRED Embodied Environment.\n"
        "Your task is to: {task}\n\n{block}"
    ),
    final_action="done",
    **_TEXT_TURNS,
)
WEBSHOP_LAYOUT = TextLayout(
    system_template=(
        "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
        "Your task is to: {task}\n\n{block}"
    ),
    repairs=(navigation_back,),
    **_TEXT_TURNS,
)
SEARCH_LAYOUT = SearchLayout(
    system_template="You are a helpful and harmless assistant.",
    human_template=(
        "You are an expert agent tasked with answering the given question step-by-step.\n"
        "Your question: {question}\n\n{block}\n\n{history}"
        "You should first reason step-by-step inside <think> </think> tags. Then either issue "
        "another search via <search>...</search> or commit to a final answer via "
        "<answer>...</answer>."
    ),
    history_header="History:\n",
    history_line="Step {j}: {action}",
    information=" <information>{information}</information>",
    history_footer="\n\n",
    output="<think>{thought}</think>\n{action}",
    progress_first="\n\n## Current Progress\n",
)

ALFWORLD = EnvSpec(
    name="alfworld",
    prompts=ALFWORLD_PROMPTS,
    memory_environment_tag="Alfworld",
    categories=tuple(categories.ALFWORLD_LABELS),
    category_labels=categories.ALFWORLD_LABELS,
    classify_task=categories.classify_alfworld,
    bank_category_key="task_specific_skills",
    layout=ALFWORLD_LAYOUT,
    postchecks=ALFWORLD_CHECKS,
    action_semantics=ALFWORLD_SEMANTICS,
    title="ALFWorld",
    skill_scope="acting in a text-based household (ALFRED) environment: finding, taking, "
    "cleaning, heating, cooling, examining and placing objects",
    dump_signs=(
        r"-= Welcome to TextWorld, ALFRED! =-",
        r"(?m)^Step \S+ \| Action: (go to|take|put|open|close|examine|use|heat|cool|clean) ",
    ),
)

WEBSHOP = EnvSpec(
    name="webshop",
    prompts=WEBSHOP_PROMPTS,
    memory_environment_tag="Webshop",
    categories=tuple(categories.WEBSHOP_LABELS),
    category_labels=categories.WEBSHOP_LABELS,
    classify_task=categories.classify_webshop,
    bank_category_key="task_specific_skills",
    layout=WEBSHOP_LAYOUT,
    postchecks=WEBSHOP_CHECKS,
    action_semantics=WEBSHOP_SEMANTICS,
    title="WebShop",
    skill_scope="shopping in a web store for a product that meets a request's attributes, "
    "options and price limit, through search[...] and click[...] actions",
    dump_signs=(r"(?m)^Step \S+ \| Action: (search|click)\[", r"\[SEP\]"),
)

SEARCH = EnvSpec(
    name="search",
    prompts=SEARCH_PROMPTS,
    memory_environment_tag="SearchAgent",
    categories=tuple(categories.SEARCH_LABELS),
    category_labels=categories.SEARCH_LABELS,
    classify_task=categories.classify_search,
    bank_category_key="query_type_skills",
    layout=SEARCH_LAYOUT,
    action_semantics=SEARCH_SEMANTICS,
    rollout_format=SEARCH_FORMAT,
    win_reward=1.0,
    title="Search-QA",
    skill_scope="answering a question step by step with a search engine: issuing "
    "<search> queries, reading what they retrieve and committing to an <answer>",
    dump_signs=(r"(?m)^Your question:", r"<(search|answer)>"),
)

ENVS: dict[str, EnvSpec] = {spec.name: spec for spec in (ALFWORLD, WEBSHOP, SEARCH)}


def get_env(name: str) -> EnvSpec:
    """Look an environment up by name, with an error that lists the valid names."""
    try:
        return ENVS[name]
    except KeyError:
        raise ValueError(f"unknown environment {name!r}; expected one of {sorted(ENVS)}") from None
