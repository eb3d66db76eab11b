"""Loop removal exactly as FORMATS.md section 1 defines it."""

import pytest

from skillsft.pipeline.formats.rollouts.loops import remove_loops


def same(x: object) -> object:
    return x


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        pytest.param([None, "a", "b", "c"], [None, "a", "b", "c"], id="no-loop"),
        pytest.param([None, "a", "a", "a", "b"], [None, "a", "b"], id="length-1"),
        pytest.param([None, "a", "b", "a", "b", "c"], [None, "a", "b", "c"], id="length-2"),
        pytest.param(list("abcabcabd"), list("abcabd"), id="partial-repeat-survives"),
        pytest.param(list("abba"), list("aba"), id="smallest-L-first"),
        pytest.param(list("xyzyz"), list("xyz"), id="after-prefix"),
        pytest.param(list("abab" + "abab"), list("ab"), id="repeated-after-each-drop"),
    ],
)
def test_remove_loops(actions: list[object], expected: list[object]) -> None:
    assert remove_loops(actions, same) == expected


def test_initial_none_step_never_matches() -> None:
    # Step -1 (action None) followed by a real action can never form a repeat window.
    assert remove_loops([None, "look"], same) == [None, "look"]


def test_keeps_the_step_objects_in_order() -> None:
    steps = [{"a": "go"}, {"a": "look"}, {"a": "look"}, {"a": "take"}]
    kept = remove_loops(steps, lambda s: s["a"])
    assert kept == [steps[0], steps[1], steps[3]]
    assert kept[1] is steps[1]


def test_a_cycle_closed_by_the_final_step_keeps_the_final_step() -> None:
    """[take, go, move, go, move(win)]: the literal rule would drop the winning pass."""
    steps = [
        {"a": None, "done": False},
        {"a": "take", "done": False},
        {"a": "go", "done": False},
        {"a": "move", "done": False, "obs": "Nothing happens."},
        {"a": "go", "done": False},
        {"a": "move", "done": True, "obs": "You put it."},
    ]
    kept = remove_loops(steps, lambda s: s["a"], lambda s: s["done"])
    assert [s["a"] for s in kept] == [None, "take", "go", "move"]
    assert kept[-1]["done"] and kept[-1]["obs"] == "You put it."
    # without the terminal rule the win would be gone
    assert not remove_loops(steps, lambda s: s["a"])[-1]["done"]
