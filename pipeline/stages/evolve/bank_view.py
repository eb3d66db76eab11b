"""The skill bank as sections of entries with ids: what edits name and the prompts show.

Sections are `general`, `mistakes` and one per category id of the environment (the bank's
`task_specific_skills` or `query_type_skills`). Edits are applied to the bank's raw JSON (see
update.py), so this view only reads.
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING

from skillsft.schemas.evolve import (
    GENERAL,
    MISTAKE_FIELDS,
    MISTAKES,
    SKILL_FIELDS,
    Entry,
)
from skillsft.schemas.skill_bank import SkillBank

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

def sections_of(spec: "EnvSpec") -> tuple[str, ...]:
    """Every section an edit may name in this environment."""
    return (GENERAL, *spec.categories, MISTAKES)


def fields_of(section: str) -> tuple[str, ...]:
    return MISTAKE_FIELDS if section == MISTAKES else SKILL_FIELDS


def entries(bank: SkillBank) -> Iterator[Entry]:
    """Every entry in bank order: general skills, each category's skills, common mistakes."""
    for skill in bank.general_skills:
        yield Entry(skill.skill_id, GENERAL, {f: getattr(skill, f) for f in SKILL_FIELDS})
    for category, skills in bank.category_skills().items():
        for skill in skills:
            yield Entry(skill.skill_id, category, {f: getattr(skill, f) for f in SKILL_FIELDS})
    for mistake in bank.common_mistakes:
        yield Entry(mistake.mistake_id, MISTAKES,
                    {f: getattr(mistake, f) for f in MISTAKE_FIELDS})


def entries_by_id(bank: SkillBank) -> dict[str, Entry]:
    """Entries by id; an id the bank repeats (released banks do not) keeps its first entry."""
    found: dict[str, Entry] = {}
    for entry in entries(bank):
        found.setdefault(entry.entry_id, entry)
    return found
