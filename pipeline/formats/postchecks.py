"""Post-checks run on a conversation's turns before they become corpus records (FORMATS.md 8).

Each check is a filter in the datatrove sense: it looks at one turn (and the turn taken just
before it) and answers keep, drop with a reason, rewrite, or insert. Every answer other than
keep is counted as `<dropped|rewritten|inserted>_<reason>`, so the run report says exactly
what was changed and why. Which checks apply to an environment is `EnvSpec.postchecks`.

A dropped turn is not emitted as a record but stays in the turn sequence: the agent did take
that action, and the histories of the later turns still show it.
"""

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from skillsft.pipeline.formats.turns import TextTurn

VerdictKind = Literal["keep", "drop", "rewrite", "insert"]
_COUNTER_PREFIX = {"drop": "dropped", "rewrite": "rewritten", "insert": "inserted"}


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    reason: str = ""
    turns: tuple[TextTurn, ...] = ()  # what replaces the turn, for rewrite and insert

    @property
    def counter(self) -> str:
        return f"{_COUNTER_PREFIX[self.kind]}_{self.reason}"


KEEP = Verdict("keep")

PostCheck = Callable[[TextTurn, TextTurn | None], Verdict]


def apply_postchecks(
    turns: Sequence[TextTurn], checks: Sequence[PostCheck], counts: Counter[str]
) -> list[TextTurn]:
    """Run every check over every turn, in order; each check sees the previous check's output."""
    result: list[TextTurn] = []
    for turn in turns:
        pending = [turn]
        for check in checks:
            checked: list[TextTurn] = []
            for current in pending:
                previous = checked[-1] if checked else (result[-1] if result else None)
                verdict = check(current, previous) if current.emit else KEEP
                if verdict.kind == "keep":
                    checked.append(current)
                    continue
                counts[verdict.counter] += 1
                if verdict.kind == "drop":
                    checked.append(replace(current, emit=False, dropped_by=verdict.reason))
                else:
                    checked.extend(verdict.turns)
            pending = checked
        result.extend(pending)
    return result


# -- ALFWorld -----------------------------------------------------------------------------


def admissible_action(turn: TextTurn, previous: TextTurn | None) -> Verdict:
    """Drop a turn whose action is not in the list the environment offered with it.

    The synthetic final turn passes because its list contains the final action by construction.
    """
    return KEEP if turn.action in turn.admissible else Verdict("drop", "action_not_admissible")


# -- WebShop ------------------------------------------------------------------------------

BUY_NOW = "click[buy now]"
NAVIGATE_BACK = "click[< prev]"
_WEBSHOP_ACTION = re.compile(r"(search|click)\[.+\]", re.DOTALL)
_DETAIL_PAGE = re.compile(r"click\[(description|features|reviews)\]", re.IGNORECASE)
NAVIGATE_BACK_THOUGHT = (
    "I have read the product's {page} and have what I need from it. The item's options and "
    "the Buy Now button are on the product page, so I go back there with click[< prev]."
)


def bare_buy_now(turn: TextTurn, previous: TextTurn | None) -> Verdict:
    """`buy now` is what the agent meant but not an action WebShop accepts; write it properly."""
    if turn.action.strip().lower() != "buy now":
        return KEEP
    return Verdict("rewrite", "bare_buy_now", (replace(turn, action=BUY_NOW),))


def invented_action(turn: TextTurn, previous: TextTurn | None) -> Verdict:
    """WebShop has only search[...] and click[...]; anything else (`check price`) is invented."""
    return KEEP if _WEBSHOP_ACTION.fullmatch(turn.action) else Verdict("drop", "invented_action")


def navigation_back(turn: TextTurn, previous: TextTurn | None) -> Verdict:
    """After a detail page (description, features, reviews) the agent must go back first.

    When the turn after `click[description]` is something other than `click[< prev]`, that turn
    is split in two: on the detail page (its observation and list) the agent clicks `< prev`,
    with a fixed thought saying why; then, back on the product page (the observation and list
    of the turn that opened the detail page, which is what `< prev` returns to), it takes the
    action it originally took.

    WebShop's layout runs this check as a repair before distillation (`TextLayout.repairs`), so
    the teacher writes the thoughts of both turns for the pages they show; the fixed thought
    below is only used when stage 4 meets a conversation distilled elsewhere that lacks it.
    """
    if previous is None or turn.action.lower() == NAVIGATE_BACK:
        return KEEP
    detail = _DETAIL_PAGE.fullmatch(previous.action)
    if detail is None:
        return KEEP
    back = TextTurn(
        observation=turn.observation,
        admissible=turn.admissible,
        action=NAVIGATE_BACK,
        thought=NAVIGATE_BACK_THOUGHT.format(page=detail.group(1).lower()),
    )
    resumed = replace(turn, observation=previous.observation, admissible=previous.admissible)
    return Verdict("insert", "navigation_back", (back, resumed))
