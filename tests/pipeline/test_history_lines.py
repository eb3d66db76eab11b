"""History lines filled once per turn give exactly the text `str.format` gives.

The turns hold the characters that could trip a hand-made formatter: braces (also `{i}`
itself), quotes, newlines-free long text, empty strings; the templates cover the released
layout, literal braces, a template without `{i}`, and templates that must fall back to
`str.format` (a spec, a conversion, an unknown field)."""

import pytest

from skillsft.pipeline.envs.text_turns import TEXT_TURNS
from skillsft.pipeline.formats.history_lines import HistoryLines, split_at_number
from skillsft.pipeline.formats.turns import TextTurn

TURNS = [
    TextTurn("You are in the middle of a room.", ("go to desk 1",), "go to desk 1"),
    TextTurn("On the desk 1, you see a {i} and {{x}} and a 'mug'.", (), "take mug {0} from desk 1"),
    TextTurn("", (), ""),
    TextTurn("Nothing happens.", ("look",), "look"),
    TextTurn("é ✓ \\ [bracketed] {observation}", (), "put mug 1 in/on shelf 2"),
    TextTurn("You open the drawer 1.", (), "open drawer 1"),
    TextTurn("The drawer 1 is open.", (), "close drawer 1"),
]

TEMPLATES = [
    TEXT_TURNS["history_line"],
    "{i}. {observation} -> {action} ({i})",
    "{{literal {i}}} {action}",
    "no number: {observation} / {action}",
    "{i}{i}{i}",
    "",
]
FALLBACK = ["{i:>3} {action}", "{i!r} {action}", "{i} {observation!r}"]


def formatted(template: str, turns: list[TextTurn], k: int, history: int) -> list[str]:
    window = turns[max(0, k - history):k] if history > 0 else []
    return [template.format(i=i, observation=t.observation, action=t.action)
            for i, t in enumerate(window, start=1)]


@pytest.mark.parametrize("template", TEMPLATES + FALLBACK)
@pytest.mark.parametrize("history", [0, 1, 2, 5, 50])
def test_every_window_matches_str_format(template: str, history: int) -> None:
    lines = HistoryLines(template, TURNS)
    for k in range(len(TURNS)):
        assert lines.window(k, history) == formatted(template, TURNS, k, history)


def test_the_fast_path_is_taken_for_plain_fields_only() -> None:
    assert all(split_at_number(template) is not None for template in TEMPLATES)
    assert all(split_at_number(template) is None for template in FALLBACK)
    assert split_at_number("{i} {unknown}") is None


def test_an_unknown_field_still_fails_like_str_format() -> None:
    with pytest.raises(KeyError):
        HistoryLines("{i} {unknown}", TURNS).window(3, 2)
