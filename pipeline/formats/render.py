"""The Retrieved-experience block (FORMATS.md section 6), rendered from a skill bank.

The block is the same for the three environments except for which per-category list it reads
(`EnvSpec.bank_category_key`, through `SkillBank.category_skills`) and the category label
(`EnvSpec.label`). Every sentence the bank supplies ends with exactly one period, whatever the
teacher wrote, because the released corpus does so; a section with no items is left out.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from skillsft.schemas.skill_bank import CommonMistake, Skill, SkillBank

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

BLOCK_TITLE = "## Retrieved Relevant Experience"


@dataclass(frozen=True)
class BlockOptions:
    """Caps on how many items each section shows; None shows them all (the default)."""

    max_general: int | None = None
    max_category: int | None = None
    max_mistakes: int | None = None


def sentence(text: str) -> str:
    """The text with surrounding whitespace and every trailing period (however spaced) removed,
    then one period."""
    return text.strip().rstrip(". \t\n") + "."


def general_item(skill: Skill) -> str:
    return f"- **{skill.title.strip()}**: {sentence(skill.principle)}"


def category_item(skill: Skill) -> str:
    line = general_item(skill)
    # An empty when_to_apply would render as "_Apply when: ._"; the line is left out instead.
    if skill.when_to_apply.strip():
        line += f"\n  _Apply when: {sentence(skill.when_to_apply)}_"
    return line


def mistake_item(mistake: CommonMistake) -> str:
    return (
        f"- **Don't**: {sentence(mistake.description)}\n"
        f"  **Instead**: {sentence(mistake.how_to_avoid)}"
    )


def section(heading: str, items: list[str]) -> str | None:
    return f"### {heading}\n" + "\n".join(items) if items else None


def render_block(
    bank: SkillBank, spec: "EnvSpec", category: str, options: BlockOptions | None = None
) -> str:
    """The block for one task category, without a trailing newline.

    A category the bank has no skills for simply has no category section (counted by the
    caller if it matters); general principles and mistakes are still shown.
    """
    options = options or BlockOptions()
    category_skills = bank.category_skills().get(category, [])
    sections = [
        section(
            "General Principles",
            [general_item(s) for s in bank.general_skills][: options.max_general],
        ),
        section(
            f"{spec.label(category)} Skills",
            [category_item(s) for s in category_skills][: options.max_category],
        ),
        section(
            "Mistakes to Avoid",
            [mistake_item(m) for m in bank.common_mistakes][: options.max_mistakes],
        ),
    ]
    return "\n\n".join([BLOCK_TITLE, *(s for s in sections if s is not None)])


def shown_item_ids(
    bank: SkillBank, category: str, options: BlockOptions | None = None
) -> list[str]:
    """The ids of the skills and mistakes `render_block` shows for a category, in block order
    (the provenance a published record carries)."""
    options = options or BlockOptions()
    return [
        *(s.skill_id for s in bank.general_skills[: options.max_general]),
        *(s.skill_id for s in bank.category_skills().get(category, [])[: options.max_category]),
        *(m.mistake_id for m in bank.common_mistakes[: options.max_mistakes]),
    ]
