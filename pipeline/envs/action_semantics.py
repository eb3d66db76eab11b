"""What actions mean, per environment, as tables: the data behind offline memories.

Each environment's actions are described by ordered `ActionRule`s: a regex with named groups,
the facts the action needs (preconditions), the facts it provides (effects), how it changes the
agent's tracked state, and a planning phrase with role placeholders. The causal-chaining engine
(pipeline/causal.py) and the mistake detectors (pipeline/mistakes.py) read only
these tables, so a fourth environment is a new table, not a new branch in stage code.

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


def _frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ActionRule:
    name: str
    pattern: re.Pattern[str]
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    # State updates applied after the step: key -> template; "" clears, "+{x}" appends to a tuple.
    updates: Mapping[str, str] = field(default_factory=_frozen)
    # Planning-pattern phrase; fields become role placeholders (see ActionSemantics.roles).
    phrase: str = ""
    # Role overrides for this rule's fields (e.g. the lamp in `use desklamp 1`).
    roles: Mapping[str, str] = field(default_factory=_frozen)


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
    roles: Mapping[str, str] = field(default_factory=_frozen)
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
    fact_phrases: Mapping[str, str] = field(default_factory=_frozen)
    # Fact kinds whose absence before a failed goal step is itself a mistake (Search evidence).
    evidence_kinds: frozenset[str] = frozenset()
    # Rules whose action ends the episode by itself (a purchase, an answer): a failed episode
    # ending with one is a wrong final choice, never a spent step budget.
    terminal_rules: frozenset[str] = frozenset()
    # The mistake such a wrong final choice is recorded as: (trigger_condition, bad_action).
    wrong_final_choice: tuple[str, str] = ("", "")


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_INSTANCE_NUMBER = (_rx(r"\s+\d+\b"), "")

ALFWORLD_SEMANTICS = ActionSemantics(
    rules=(
        ActionRule("go", _rx(r"^go to (?P<loc>.+)$"), provides=("at:{loc}",),
                   updates=_frozen({"here": "{loc}"}), phrase="Go to {loc}"),
        ActionRule("take", _rx(r"^take (?P<obj>.+?) from (?P<loc>.+)$"),
                   needs=("at:{loc}", "open:{loc}"), provides=("holding:{obj}",),
                   updates=_frozen({"held": "{obj}"}), phrase="Take {obj} from {loc}"),
        ActionRule("put", _rx(r"^(?:move|put) (?P<obj>.+?) (?:to|in|on|in/on) (?P<loc>.+)$"),
                   needs=("at:{loc}", "holding:{obj}", "open:{loc}"),
                   provides=("in:{obj_type}:{loc}",),
                   updates=_frozen({"held": ""}), phrase="Put {obj} in/on {loc}"),
        ActionRule("open", _rx(r"^open (?P<loc>.+)$"), needs=("at:{loc}",),
                   provides=("open:{loc}",), phrase="Open {loc}"),
        ActionRule("clean", _rx(r"^clean (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{tool}", "holding:{obj}"), provides=("clean:{obj}",),
                   phrase="Clean {obj} with {tool}"),
        ActionRule("heat", _rx(r"^heat (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{tool}", "holding:{obj}"), provides=("hot:{obj}",),
                   phrase="Heat {obj} with {tool}"),
        ActionRule("cool", _rx(r"^cool (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{tool}", "holding:{obj}"), provides=("cold:{obj}",),
                   phrase="Cool {obj} with {tool}"),
        ActionRule("slice", _rx(r"^slice (?P<obj>.+?) with (?P<tool>.+)$"),
                   needs=("at:{here}", "holding:{tool}"), provides=("sliced:{obj}",),
                   phrase="Slice {obj} with {tool}", roles=_frozen({"tool": "Tool"})),
        # A lamp stays on: switched on before the pick-up, it still lights the object later.
        ActionRule("use", _rx(r"^use (?P<tool>.+)$"), needs=("at:{here}",),
                   provides=("light:on", "lit:{held}"), phrase="Use {tool}",
                   roles=_frozen({"tool": "Light_Source"})),
    ),
    no_effect_observations=frozenset({"Nothing happens."}),
    goal_requirements=(
        GoalRequirement(_rx(r"\bclean\b"), "clean:{obj}"),
        GoalRequirement(_rx(r"\b(hot|heat)\b"), "hot:{obj}"),
        GoalRequirement(_rx(r"\b(cool|cold)\b"), "cold:{obj}"),
        GoalRequirement(_rx(r"\btwo\b"), "in:{obj_type}:{loc}"),
        # Light tasks: the lamp on, and the object in hand where the lamp is.
        GoalRequirement(_rx(r"\b(under|with) the \w*lamp\b"), "light:on"),
        GoalRequirement(_rx(r"\b(under|with) the \w*lamp\b"), "holding:{held}"),
    ),
    roles=_frozen({"obj": "Object", "held": "Object", "loc": "Location", "here": "Location",
                   "tool": "Appliance"}),
    action_abstractions=(_INSTANCE_NUMBER,),
    fact_phrases=_frozen({
        "at": "being at {0}", "holding": "holding {0}", "open": "{0} being open",
        "in": "a {0} already in {1}", "clean": "{0} being clean", "hot": "{0} being hot",
        "cold": "{0} being cool", "sliced": "{0} being sliced", "lit": "{0} under the light",
        "light": "the lamp being switched on",
    }),
)

_ASIN = r"(?:b0[a-z0-9]{8}|\d{9}[\dx])"
WEBSHOP_SEMANTICS = ActionSemantics(
    rules=(
        ActionRule("search", _rx(r"^search\[(?P<query>.+)\]$"), provides=("page:results",),
                   updates=_frozen({"item": "", "options": ""}), phrase="Search for {query}"),
        ActionRule("paginate", _rx(r"^click\[next >\]$"), needs=("page:results",),
                   provides=("page:results",), phrase="Open the next results page"),
        ActionRule("navigate", _rx(r"^click\[(?:< prev|back to search)\]$")),
        ActionRule("inspect", _rx(r"^click\[(?:description|features|reviews|attributes)\]$"),
                   needs=("page:item:{item}",)),
        ActionRule("buy", _rx(r"^click\[buy now\]$"),
                   needs=("page:item:{item}", "option:{options}"), phrase="Click Buy Now"),
        ActionRule("product", _rx(rf"^click\[(?P<item>{_ASIN})\]$"), needs=("page:results",),
                   provides=("page:item:{item}",),
                   updates=_frozen({"item": "{item}", "options": ""}), phrase="Open {item}"),
        ActionRule("option", _rx(r"^click\[(?P<option>.+)\]$"), needs=("page:item:{item}",),
                   provides=("option:{option}",), updates=_frozen({"options": "+{option}"}),
                   phrase="Select {option}"),
    ),
    roles=_frozen({"query": "Product_Query", "item": "Product", "option": "Option"}),
    target_field="item",
    target_role="Product",
    action_abstractions=((_rx(rf"\[{_ASIN}\]"), "[[Product]]"),),
    free_text_actions=_rx(r"^search\["),
    goal_constraint_pattern=_rx(r"(?:,|\bwith\b)\s*(?:and\s+)?([a-z]+(?: [a-z]+){0,2}):\s*"
                                r"([^,]+?)(?=,|$|\s+and\s+price)"),
    fact_phrases=_frozen({
        "page": "the {0} page being open", "option": "option '{0}' being selected",
    }),
    terminal_rules=frozenset({"buy"}),
    wrong_final_choice=(
        "A product page is open but not every requirement of the task (item type, size, "
        "colour, price) has been checked against it",
        "Buying a product whose attributes or selected options do not match every requirement "
        "of the task"),
)

SEARCH_SEMANTICS = ActionSemantics(
    rules=(
        # A query naming an entity an earlier result revealed (the bridge of a multi-hop
        # question) depends on that result.
        ActionRule("search", _rx(r"^<search>\s*(?P<query>.+?)\s*</search>$"),
                   needs=("bridge:{query}",), phrase="Search {query}"),
        ActionRule("answer", _rx(r"^<answer>\s*(?P<answer>.+?)\s*</answer>$"),
                   needs=("seen:{answer}",), phrase="Synthesize {answer}"),
    ),
    # Each kept query is its own hop: [Entity_1], [Entity_2], ... (numbered like objects).
    roles=_frozen({"query": "Entity", "answer": "Answer"}),
    target_field="answer",
    target_role="Answer",
    free_text_actions=_rx(r"^<(search|answer)>"),
    fact_phrases=_frozen({"seen": "retrieved evidence mentioning '{0}'",
                          "bridge": "an earlier result naming what '{0}' asks about"}),
    evidence_kinds=frozenset({"seen"}),
    terminal_rules=frozenset({"answer"}),
    wrong_final_choice=(
        "The retrieved passages do not clearly support one candidate answer",
        "Committing to an answer that the retrieved evidence does not support instead of "
        "searching again with a more specific query"),
)
