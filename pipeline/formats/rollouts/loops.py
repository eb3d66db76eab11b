"""Loop removal ("dedupe", FORMATS.md section 1): trim an agent stuck repeating a cycle.

Walking the steps in order, after appending each step: if the last L actions equal the L
actions just before them, for the smallest such L >= 1, the last L steps are dropped, and the
check is repeated on what remains (a drop can expose another repetition).

`Step -1` (action None) is appended like any step but can never be part of a match: it is
always the first step and the only one whose action is None, so a window holding it never
equals a window without it. Including or excluding it gives the same result; we include it so
the function works on any list of steps without special cases.
"""

from collections.abc import Callable, Sequence
from typing import TypeVar

StepT = TypeVar("StepT")


def _repeat_length(actions: list[object]) -> int:
    """Smallest L >= 1 with actions[-L:] == actions[-2L:-L], or 0 when there is none."""
    n = len(actions)
    for length in range(1, n // 2 + 1):
        if actions[n - length :] == actions[n - 2 * length : n - length]:
            return length
    return 0


def remove_loops(
    steps: Sequence[StepT],
    action_of: Callable[[StepT], object],
    is_terminal: Callable[[StepT], bool] | None = None,
) -> list[StepT]:
    """Steps with repeated cycles cut out, in their original order.

    When the step just appended ends the episode (`is_terminal`), the earlier copy of the cycle
    is dropped instead of the later one: both copies hold the same actions, but only the later
    one holds the final step, and dropping it would turn a won episode into one that never
    reaches its win (the agent's last pass through the cycle is the one that worked).
    """
    kept: list[StepT] = []
    actions: list[object] = []
    for step in steps:
        kept.append(step)
        actions.append(action_of(step))
        ends = is_terminal is not None and is_terminal(step)
        while (length := _repeat_length(actions)) > 0:
            cut = slice(-2 * length, -length) if ends else slice(-length, None)
            del kept[cut]
            del actions[cut]
    return kept
