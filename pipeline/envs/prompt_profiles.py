"""What the teacher is told about each environment, as data: one `PromptProfile` per environment.

The memory and skill-bank prompts are shared text with holes; everything that differs between
ALFWorld, WebShop and Search (how a description reads, how a refined trajectory and a planning
pattern are abstracted, which placeholders exist, a worked example, how many skills the bank
keeps) lives here, so the stage code renders every environment the same way and a prompt change
for one environment is a data edit that shows up in that environment's golden files only.

`BankShape` is the size the released banks have: 5-7 general principles, 5-6 skills per category
and exactly 5 common mistakes. The counts are asked of the teacher at the last reduction level
and checked afterwards (pipeline/bank_checks.py); they are never padded.
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


def _words(mapping: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(mapping)


ALFWORLD_PROMPTS = PromptProfile(
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
    placeholders=_words({
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
)

WEBSHOP_PROMPTS = PromptProfile(
    description_form=(
        "WebShop task to <verb> a <broad item category> with <kinds of constraints>. "
        "<outcome>."
    ),
    description_rules=(
        "Name the kinds of constraints only (price, size, colour, material, pack count...), "
        "never their values: 'with size, colour and price constraints', not 'size 9, under 80 "
        "dollars'.",
        "The item category is broad ('running shoes', 'face serum'), never a product title.",
        "<outcome> says how the purchase was found, or why the episode failed (a wrong "
        "purchase, an option never selected, the step budget).",
    ),
    goal_step="click[buy now]",
    refinement_rules=(
        "Replace product titles and ids with the broad item category.",
        "Never write a concrete value: use [Price_Constraint], [Size_Constraint], "
        "[Color_Constraint] and similar, also inside actions (click[[Size_Constraint]]).",
        "Summarise each observation as the state change it shows (results listed, product page "
        "open, option selected), not as a copy of the page.",
    ),
    pattern_rules=(
        "Write a skeleton of action types joined by ' -> ', such as 'Search -> Filter -> Select "
        "-> Verify -> Buy', with no product names or constraint values.",
    ),
    mistake_rules=(
        "Triggers and bad actions name kinds of constraints ([Size_Constraint], "
        "[Price_Constraint]), never their values or product ids.",
    ),
    placeholders=_words({
        "[Price_Constraint]": "the price limit", "[Size_Constraint]": "the requested size",
        "[Color_Constraint]": "the requested colour", "[Product]": "the product",
        "[Product_Query]": "a query with the key attributes", "[Option]": "the required option",
    }),
    example_description=(
        "WebShop task to buy a pair of sneakers with size, colour and price constraints. "
        "Solved by searching with the key attributes, opening the best match, selecting the "
        "required options and buying."
    ),
    example_pattern="Search -> Select -> Filter -> Verify -> Buy",
    offline_success=("WebShop task to buy {label} with {constraints} constraints. Solved by "
                     "{summary}."),
    offline_failure=("WebShop task to buy {label} with {constraints} constraints. Unsolved due "
                     "to {cause}."),
)

SEARCH_PROMPTS = PromptProfile(
    description_form="One plain paragraph of one to three sentences.",
    description_rules=(
        "Say what kind of question it is: multi-hop reasoning or direct retrieval.",
        "Say what the agent did and whether it succeeded, and briefly why.",
    ),
    goal_step="the step that gave the final answer",
    refinement_rules=(
        "Keep only the searches whose results were used for the answer, including the search "
        "that found a bridge entity a later search depends on; drop searches that returned "
        "nothing useful.",
        "Replace entities with placeholders ('Search for [Person] career history').",
        "Summarise each observation by the kind of fact it gave ('found career dates and team "
        "list'), never by copying the passage.",
    ),
    pattern_rules=(
        "Write a decomposition chain such as 'Decompose Question -> Search Entity A -> Search "
        "Entity B -> Synthesize', with generic terms [Entity], [Attribute], [Time_Period] "
        "instead of names, dates or answers.",
    ),
    mistake_rules=(
        "Triggers and bad actions are abstract ('ambiguous entity name' / 'repeated the same "
        "query'); never quote the answer or a wrong answer.",
    ),
    placeholders=_words({
        "[Entity]": "the entity", "[Attribute]": "the asked attribute",
        "[Time_Period]": "the time period", "[Person]": "the person", "[Query]": "a query",
        "[Answer]": "the answer",
    }),
    example_description=(
        "A multi-hop question asking for the birthplace of a film's director. The agent first "
        "identified the director, then searched the director's biography, and answered "
        "correctly because both hops were supported by retrieved passages."
    ),
    example_pattern=(
        "Decompose Question -> Search [Entity] -> Search [Attribute] of [Entity] -> Synthesize"
    ),
    category_noun="query type",
    offline_success=("A {label} question. The agent's plan: {summary}; it answered correctly "
                     "because a retrieved passage stated the answer."),
    offline_failure="A {label} question. The agent failed, due to {cause}.",
)

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

