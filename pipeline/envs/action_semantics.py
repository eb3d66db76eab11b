"""What actions mean, per environment, as tables: the data behind offline memories.

Each environment's actions are described by ordered `ActionRule`s: a regex with named groups,
the facts the action needs (preconditions), the facts it provides (effects), how it changes the
agent's tracked state, and a planning phrase with role placeholders. The offline teacher's
causal-chaining engine (pipeline/teacher/offline/causal.py) and its mistake detectors
(mistakes.py beside it) read only these tables, so a fourth environment is a new table, not a
new branch in stage code.

Fact templates are `kind:value` strings formatted with the rule's regex groups, the tracked
state before the action (`here`, `held`, `item`, `options`) and, for every field `f`, `f_type`
(the value without its instance number: `tomato 2` -> `tomato`). A template whose fields are
empty is skipped; a field holding a tuple (`options`) expands to one fact per element.
Facts of kind `seen` are provided by any earlier step whose observation contains the value
(Search: the retrieved passage that holds the final answer).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ActionRule:
    name: str
    pattern: re.Pattern[str]
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    # State updates applied after the step: key -> template; "" clears, "+{x}" appends to a tuple.
    updates: Mapping[str, str] = field(default_factory=frozen)
    # Planning-pattern phrase; fields become role placeholders (see ActionSemantics.roles).
    phrase: str = ""
    # Role overrides for this rule's fields (e.g. the lamp in `use desklamp 1`).
    roles: Mapping[str, str] = field(default_factory=frozen)


@dataclass(frozen=True)
class GoalRequirement:
    """A fact the goal needs beyond the winning step itself, when the goal text matches."""

    goal_pattern: re.Pattern[str]
    fact: str


@dataclass(frozen=True)
class ActionSemantics:
    rules: tuple[ActionRule, ...]
    # Observations meaning "the action had no effect" (ALFWorld's `Nothing happens.`).
    no_effect_observations: frozenset[str] = frozenset()
    goal_requirements: tuple[GoalRequirement, ...] = ()
    # Field name -> placeholder role; `Object` roles are numbered by type, others are not.
    roles: Mapping[str, str] = field(default_factory=frozen)
    # The role given to the place where the winning step acts.
    target_role: str = "Target_Location"
    target_field: str = "loc"
    # Substitutions turning a concrete action into the abstract one shown in a memory.
    action_abstractions: tuple[tuple[re.Pattern[str], str], ...] = ()
    # Actions that carry free text and so never appear verbatim in an admissible list.
    free_text_actions: re.Pattern[str] | None = None
    # Goal constraints `name: value` whose values become `[Name]` placeholders (WebShop).
    goal_constraint_pattern: re.Pattern[str] | None = None
    # How each fact kind reads in a refined step's reasoning.
    fact_phrases: Mapping[str, str] = field(default_factory=frozen)
    # Fact kinds whose absence before a failed goal step is itself a mistake (Search evidence).
    evidence_kinds: frozenset[str] = frozenset()
    # Rules whose action ends the episode by itself (a purchase, an answer): a failed episode
    # ending with one is a wrong final choice, never a spent step budget.
    terminal_rules: frozenset[str] = frozenset()
    # The mistake such a wrong final choice is recorded as: (trigger_condition, bad_action).
    wrong_final_choice: tuple[str, str] = ("", "")


def rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def match_rule(action: str, semantics: ActionSemantics
               ) -> tuple[ActionRule, dict[str, str]] | None:
    """The first rule whose pattern matches the whole action, with its named groups."""
    for rule in semantics.rules:
        found = rule.pattern.match(action.strip())
        if found:
            return rule, {k: v for k, v in found.groupdict().items() if v}
    return None
