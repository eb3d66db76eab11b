"""The admissible-action list the writer appends to each observation, in both of its styles.

Single line: `[go to cabinet 1, inventory, look]`. Multi-line quoted (a Python list repr):
`['go to cabinet 1',\n 'inventory',\n 'look']`. WebShop actions carry commas inside brackets
(`search[red shirt, size large]`), so a comma only separates actions outside `[...]`.
`help` is the engine's meta command, not an action, and is left out.
"""

import re

PREFIX = "Your admissible actions of the current situation are:"
NOT_ACTIONS = frozenset({"help"})
# One quoted item of a Python list repr, either quote style, escapes allowed.
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")


def _unescape(item: str) -> str:
    if "\\" not in item:
        return item
    return item.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _split_outside_brackets(body: str) -> list[str]:
    """Split on commas, then glue back pieces whose `[` is still open."""
    if "[" not in body:
        return list(map(str.strip, body.split(",")))
    items: list[str] = []
    pending = ""
    for piece in body.split(","):
        pending = f"{pending},{piece}" if pending else piece
        if pending.count("[") <= pending.count("]"):
            items.append(pending.strip())
            pending = ""
    if pending:
        items.append(pending.strip())
    return items


def _split_plain_quoted(body: str) -> list[str] | None:
    """Fast path: items joined by `', '` or `',\n '` with no quotes or escapes inside them.

    Returns None when that shape does not hold, and the caller falls back to the full scanner.
    """
    quote = body[0]
    if "\\" in body or body[-1] != quote:
        return None
    separator = f"{quote},\n {quote}" if "\n" in body else f"{quote}, {quote}"
    items = body[1:-1].split(separator)
    return items if body.count(quote) == 2 * len(items) else None


def split_admissible(body: str) -> list[str]:
    """Actions in the text between the list's outer brackets (either style)."""
    body = body.strip()
    if not body:
        return []
    if body[0] in "'\"":
        actions = _split_plain_quoted(body)
        if actions is None:
            actions = [_unescape(a if a or not b else b) for a, b in _QUOTED.findall(body)]
    else:
        actions = _split_outside_brackets(body)
    if "" in actions or not NOT_ACTIONS.isdisjoint(actions):  # rare: filter only then
        actions = [a for a in actions if a and a not in NOT_ACTIONS]
    return actions
