"""After aggregation: does the bank have the shape it was asked for, in natural English?

The teacher is asked for 5-7 general principles, 5-6 skills per category and 5 mistakes, with
no bracketed placeholders. A model (or the offline teacher on a small corpus) may still miss:
this check never pads or rewrites the bank, it counts what slipped through so the stage
manifest and the run report can say so.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from skillsft.pipeline.envs.prompt_profiles import BankShape, CountRange, bracketed_placeholders
from skillsft.schemas.skill_bank import SkillBank


@dataclass
class BankCheck:
    # (where, placeholder): e.g. ("category:heat/hea_002.principle", "[Object_1]")
    placeholder_slips: list[tuple[str, str]] = field(default_factory=list)
    # section -> (entries, the range asked for), for sections outside their range
    off_shape: dict[str, tuple[int, str]] = field(default_factory=dict)

    def as_metadata(self) -> dict[str, object]:
        return {
            "placeholder_slips": len(self.placeholder_slips),
            "placeholder_examples": [f"{where}: {text}" for where, text
                                     in self.placeholder_slips[:5]],
            "sections_off_shape": {k: {"entries": n, "asked": asked}
                                   for k, (n, asked) in self.off_shape.items()},
        }


def _scan(check: BankCheck, where: str, fields: Iterable[tuple[str, str]]) -> None:
    for name, text in fields:
        for found in bracketed_placeholders(text):
            check.placeholder_slips.append((f"{where}.{name}", found))


def _size(check: BankCheck, section: str, entries: int, asked: CountRange) -> None:
    if not asked.low <= entries <= asked.high:
        check.off_shape[section] = (entries, str(asked))


def check_bank(bank: SkillBank, categories: Iterable[str], shape: BankShape) -> BankCheck:
    """Placeholders anywhere in the bank's prose, and sections whose size is off the shape.
    A category without any success memory has no skills to ask for and is not flagged."""
    check = BankCheck()
    for skill in bank.general_skills:
        _scan(check, f"general/{skill.skill_id}", (("title", skill.title),
              ("principle", skill.principle), ("when_to_apply", skill.when_to_apply)))
    _size(check, "general", len(bank.general_skills), shape.general)
    per_category = bank.category_skills()
    for category in categories:
        skills = per_category.get(category, [])
        for skill in skills:
            _scan(check, f"category:{category}/{skill.skill_id}", (("title", skill.title),
                  ("principle", skill.principle), ("when_to_apply", skill.when_to_apply)))
        if skills:
            _size(check, f"category:{category}", len(skills), shape.per_category)
    for mistake in bank.common_mistakes:
        _scan(check, f"mistakes/{mistake.mistake_id}", (("description", mistake.description),
              ("why_it_happens", mistake.why_it_happens), ("how_to_avoid", mistake.how_to_avoid)))
    _size(check, "mistakes", len(bank.common_mistakes), shape.mistakes)
    return check
