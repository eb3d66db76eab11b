"""What the teacher is told about each environment, as data: one `PromptProfile` per environment.

The memory and skill-bank prompts are shared text with holes; everything that differs between
ALFWorld, WebShop and Search (how a description reads, how a refined trajectory and a planning
pattern are abstracted, which placeholders exist, a worked example, how many skills the bank
keeps) lives here, so the stage code renders every environment the same way and a prompt change
for one environment is a data edit that shows up in that environment's golden files only.

`BankShape` is the size the released banks have: 5-7 general principles, 5-6 skills per category
and exactly 5 common mistakes. The counts are asked of the teacher at the last reduction level
and checked afterwards (pipeline/stages/bank_checks.py); they are never padded.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated

from skillsft.pipeline.options import Opt


@dataclass(frozen=True)
class CountRange:
    """How many entries a bank section should end with, inclusive."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"a count range needs 1 <= low <= high, got {self.low}-{self.high}")

    @classmethod
    def parse(cls, text: str) -> "CountRange":
        """`5-7` or `5`; ValueError names the expected form."""
        low, dash, high = str(text).strip().partition("-")
        try:
            return cls(int(low), int(high if dash else low))
        except ValueError:
            raise ValueError(f"expected a count N or a range N-M, got {text!r}") from None

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"

    def wording(self) -> str:
        return f"exactly {self.low}" if self.low == self.high else (
            f"between {self.low} and {self.high}")


@dataclass(frozen=True)
class BankShape:
    general: Annotated[CountRange, Opt("general principles the bank ends with",
                                       name="general_skills", kind="count_range")] = \
        CountRange(5, 7)
    per_category: Annotated[CountRange, Opt("skills per category the bank ends with",
                                            name="category_skills", kind="count_range")] = \
        CountRange(5, 6)
    mistakes: Annotated[CountRange, Opt("common mistakes the bank ends with",
                                        name="common_mistakes", kind="count_range")] = \
        CountRange(5, 5)

    def as_dict(self) -> dict[str, str]:
        return {"general": str(self.general), "per_category": str(self.per_category),
                "mistakes": str(self.mistakes)}


@dataclass(frozen=True)
class PromptProfile:
    # What the memory's contextual_description must look like (one template, then its rules).
    description_form: str
    description_rules: tuple[str, ...]
    # How a success's refined trajectory is chained back and abstracted.
    goal_step: str  # the step backward chaining starts from
    refinement_rules: tuple[str, ...]
    # How a success's planning pattern is written, and a failure's mistakes.
    pattern_rules: tuple[str, ...]
    mistake_rules: tuple[str, ...]
    # The placeholders memories may use, with the plain words a skill bank uses instead.
    placeholders: Mapping[str, str]
    # One worked example of a description and a pattern in this environment's form.
    example_description: str
    example_pattern: str
    # What the per-category skills of the bank are about, for the aggregation prompt.
    category_noun: str = "task category"
    # The offline teacher's descriptions in this form. Fields: {category} (the id), {label}
    # (its words), {goal} (abstracted), {constraints} (kinds only), {summary}, {cause}.
    offline_success: str = "Task classified as '{category}' to {goal}. Solved by {summary}."
    offline_failure: str = "Task classified as '{category}' to {goal}. Unsolved due to {cause}."
    # What the evolve reflect prompt says about revising this environment's bank, one rule a
    # line (pipeline/stages/evolve/reflect.py).
    reflect_rules: tuple[str, ...] = ()


def plain_words(mapping: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(mapping)


# `[Object_1]`, `[Price_Constraint]`, `[[Size_Constraint]]` (inside a WebShop click): a capital
# letter first, so verbatim actions such as `click[buy now]` are not mistaken for one.
_PLACEHOLDER = re.compile(r"(?P<pre>\w?)\[\[?(?P<name>[A-Z][A-Za-z]*(?:_[A-Za-z]+)*)(?:_\d+)?\]\]?")


def bracketed_placeholders(text: str) -> list[str]:
    """Every `[Something]` placeholder in the text (what a skill bank must not contain)."""
    return [match.group(0)[len(match.group("pre")):] for match in _PLACEHOLDER.finditer(text)]


def naturalise(text: str, words: Mapping[str, str]) -> str:
    """Placeholders as plain words: the profile's wording first, else `[Price_Limit]` -> `the
    price limit`. Used where memories' abstract patterns become bank prose."""

    def plain(match: re.Match[str]) -> str:
        pre = match.group("pre")
        whole = match.group(0)[len(pre):].strip("[]")
        known = words.get(f"[{whole}]") or "the " + match.group("name").replace("_", " ").lower()
        return f"{pre} {known}" if pre else known

    return _PLACEHOLDER.sub(plain, text)

