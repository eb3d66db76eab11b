"""Task categories per environment, as data: keyword rules, labels and the classifier over them.

A rule table is ordered; the first category whose pattern matches the goal wins, and the
environment's fallback category is used when none does. Keeping the rules as data means a new
environment or a refined rule is a table edit, not a new branch in stage code.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CategoryRule:
    category: str
    pattern: re.Pattern[str]


def rules(*pairs: tuple[str, str]) -> tuple[CategoryRule, ...]:
    """Compile (category, regex) pairs, case-insensitive, in priority order."""
    return tuple(CategoryRule(cat, re.compile(rx, re.IGNORECASE)) for cat, rx in pairs)


def classify(goal: str, table: Sequence[CategoryRule], fallback: str) -> str:
    """Return the first category whose pattern is found in the goal text, else the fallback."""
    for rule in table:
        if rule.pattern.search(goal):
            return rule.category
    return fallback
