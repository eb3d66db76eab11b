"""One turn of a text environment as data, shared by the layouts and the post-checks that
rewrite them (its own module so that neither imports the other)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class TextTurn:
    """A text-environment turn as data: what was seen, what was done, and why.

    `emit` is False for a turn a post-check dropped: it stays in the sequence because the
    agent did take that action, so later turns' histories still show it.
    """

    observation: str
    admissible: tuple[str, ...]
    action: str
    thought: str = ""
    emit: bool = True
    dropped_by: str = ""  # the post-check reason when a check dropped this turn
