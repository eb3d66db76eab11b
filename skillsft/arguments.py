"""Argument parsing that refuses what it does not understand, and says what was meant.

argparse's defaults are too forgiving for a tool that is scripted: `--conc 4` silently means
`--concurrency 4` until a later flag shares the prefix, and a misspelled flag or command gets
no hint. `StrictParser` turns prefix matching off for every (sub)command and adds a
"did you mean" to unknown flags and choices. The value types below turn out-of-range numbers
into usage errors (exit 2) that name the flag, before any work starts.
"""

import argparse
import difflib
import re
from collections.abc import Iterable
from typing import NoReturn


class StrictParser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        """Two lines, not argparse's page of usage: what is wrong, and where help is."""
        hint = suggestion_for(message, self._known_words())
        self.exit(2, f"{self.prog}: error: {message}" + (f" (did you mean {hint}?)" if hint else "")
                  + f"\n{self.prog}: see '{self.prog} --help'\n")

    def _known_words(self) -> list[str]:
        """Every option and choice this parser and its subcommands accept."""
        words: list[str] = []
        for action in self._actions:
            words.extend(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    words.append(name)
                    if isinstance(sub, StrictParser):
                        words.extend(sub._known_words())
            elif action.choices:
                words.extend(str(choice) for choice in action.choices)
        return words


_UNKNOWN = (
    re.compile(r"unrecognized arguments: (.+)$"),
    re.compile(r"invalid choice: '([^']+)'"),
)


def suggestion_for(message: str, known: Iterable[str]) -> str | None:
    """The closest known flag or choice to the first unknown word in an argparse message."""
    for pattern in _UNKNOWN:
        found = pattern.search(message)
        if not found:
            continue
        word = found.group(1).split()[0].split("=")[0]
        candidates = [k for k in set(known) if k.startswith("-") == word.startswith("-")]
        close = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
        return close[0] if close else None
    return None


def _number(text: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(text)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {noun}, got {text!r}") from None


def positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def non_negative_float(text: str) -> float:
    value = float(_number(text, float))
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(_number(text, float))
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def share(text: str) -> float:
    """A share of items, 0 to 1 inclusive (a failure rate)."""
    value = float(_number(text, float))
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def held_out_share(text: str) -> float:
    """A share held out of a corpus: 0 up to, not including, 1 (something must be left)."""
    value = float(_number(text, float))
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {text}")
    return value


def copy_arguments(source: argparse.ArgumentParser, target: argparse.ArgumentParser) -> None:
    """Give `target` every argument of `source` (a command that takes what another takes, such
    as `estimate` and `run`), so a flag added to one is never missing from the other."""
    taken = {option for action in target._actions for option in action.option_strings}
    for action in source._actions:
        if not taken.intersection(action.option_strings):  # --help, shared parents' flags
            target._add_action(action)
