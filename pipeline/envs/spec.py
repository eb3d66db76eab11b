"""What describes one environment: `EnvSpec`, the type every environment module fills in.

Stage code receives an `EnvSpec` and never branches on `spec.name`: everything that differs
between ALFWorld, WebShop and Search (rollout format, selection, categories, templates,
post-checks) is a field here. The specs themselves live one module per environment
(pipeline/envs/alfworld.py, webshop.py, search.py) and are registered in pipeline/envs/__init__.py.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from skillsft.pipeline.envs.action_semantics import ActionSemantics
from skillsft.pipeline.envs.prompt_profiles import BankShape, PromptProfile
from skillsft.pipeline.formats.conversations import Layout
from skillsft.pipeline.formats.postchecks import PostCheck
from skillsft.pipeline.formats.rollouts.kinds import STEP_FORMAT, RolloutFormat


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
    # the checks a turn must pass before it becomes a record (pipeline/formats/postchecks.py).
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
