"""The turn strings of the released SkillRL SFT corpus for text environments (ALFWorld, WebShop).

Both environments render their turns with the same observation/history/action wording and
differ only in the system prompt, the final action and the repairs; `text_layout` builds a
`TextLayout` from those differences. Search renders its turns its own way (pipeline/envs/search.py).
"""

from typing import Any

from skillsft.pipeline.formats.conversations import TextLayout

# FORMATS.md 7-8, byte for byte: the layout of the released SkillRL SFT corpus.
TEXT_TURN_TAIL = (
    "Your admissible actions of the current situation are: [{admissible}].\n\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)
TEXT_TURNS = dict(
    first_turn="Your current observation is: {observation}\n" + TEXT_TURN_TAIL,
    later_turn=(
        "{history}\nYou are now at step {step} and your current observation is: {observation}\n"
        + TEXT_TURN_TAIL
    ),
    history_line="[Observation {i}: '{observation}', Action {i}: '{action}']",
    output="<think>{thought}</think>\n<action>{action}</action>",
    progress_first="\n\n## Current Progress\n",
    progress_later=(
        "\n\n## Current Progress\n\nPrior to this step, you have already taken {k} step(s). "
        "Below are the most recent {n} observations and the corresponding actions you took: "
    ),
)


def text_layout(system_template: str, **differences: Any) -> TextLayout:
    """A `TextLayout` with the shared SkillRL turn strings and this environment's system text."""
    return TextLayout(system_template=system_template, **TEXT_TURNS, **differences)

