"""The history lines of a text layout's human turns, each turn's part of them filled once.

Turn k's human text shows up to `history` earlier (observation, action) pairs, numbered from 1
inside the window, so every pair is rendered again for each of the next `history` turns with a
different number; distillation renders every turn once and flatten twice more (reading back
and the record), which made `str.format` of the history line the largest item of those stages'
own CPU. Here the line template is split at its `{i}` fields once per template, a turn's
observation and action are filled into the pieces once per turn, and a line is the pieces
joined with its number: the same text `template.format(i=i, observation=..., action=...)`
gives, at a fraction of the cost. A template with any other field, or with a conversion or
format spec, is rendered with `str.format` as before.
"""

import functools
import string
from collections.abc import Sequence

from skillsft.pipeline.formats.turns import TextTurn

_FILLED = ("observation", "action")
# One piece of a line between two `{i}`: (literal text, field filled after it or None) pairs.
Piece = tuple[tuple[str, str | None], ...]


@functools.lru_cache(maxsize=16)
def split_at_number(template: str) -> tuple[Piece, ...] | None:
    """The template's pieces between its `{i}` fields, or None if it has a field this module
    does not fill the same way `str.format` would (another name, a conversion, a spec)."""
    pieces: list[Piece] = []
    current: list[tuple[str, str | None]] = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            current.append((literal, None))
            continue
        if spec or conversion or (field != "i" and field not in _FILLED):
            return None
        if field == "i":
            current.append((literal, None))
            pieces.append(tuple(current))
            current = []
        else:
            current.append((literal, field))
    pieces.append(tuple(current))
    return tuple(pieces)


class HistoryLines:
    """The history lines of one list of turns, as `template` renders them."""

    def __init__(self, template: str, turns: Sequence[TextTurn]) -> None:
        self.template = template
        self.turns = turns
        split = split_at_number(template)
        self.filled: list[tuple[str, ...]] | None = None
        if split is not None:
            self.filled = [self._fill(split, turn) for turn in turns]

    @staticmethod
    def _fill(split: tuple[Piece, ...], turn: TextTurn) -> tuple[str, ...]:
        values = {"observation": turn.observation, "action": turn.action}
        return tuple("".join(literal + (values[field] if field else "")
                             for literal, field in piece) for piece in split)

    def window(self, k: int, history: int) -> list[str]:
        """The lines turn k shows: the `history` turns before it (none if history <= 0)."""
        start = max(0, k - history) if history > 0 else k
        if self.filled is None:
            return [self.template.format(i=i, observation=t.observation, action=t.action)
                    for i, t in enumerate(self.turns[start:k], start=1)]
        stop = min(k, len(self.filled))
        return [str(i).join(self.filled[j]) for i, j in enumerate(range(start, stop), start=1)]
