"""Concrete names -> role placeholders (`[Object_1]`, `[Location]`, `[Target_Location]`).

Memories must transfer to other scenes, so instance numbers and constraint values are
abstracted: objects are numbered by type in order of first appearance (`tomato 2` and
`tomato 1` are both `[Object_1]`), the place the winning step acts on is the target, other
places share one unnumbered role, and WebShop constraint values from the goal (`size: large`)
become `[Size]`. Roles come from the environment's `ActionSemantics`, never from its name.
"""

import re
from collections.abc import Iterable, Sequence

from skillsft.pipeline.envs.action_semantics import ActionRule, ActionSemantics
from skillsft.pipeline.teacher.offline.causal import AnalysedStep, FieldValue, type_of

_NUMBERED_ROLES = frozenset({"Object", "Entity"})
# Roles a more specific one (Appliance, Light_Source) replaces for the same value.
_GENERIC_ROLES = frozenset({"Location"})
_FIELD_NAME = re.compile(r"\{(\w+)\}")


def goal_constraints(goal: str, semantics: ActionSemantics) -> dict[str, str]:
    """`... with color: grey, and size: 8.5` -> {"grey": "[Color]", "8.5": "[Size]"}."""
    if semantics.goal_constraint_pattern is None:
        return {}
    found: dict[str, str] = {}
    for match in semantics.goal_constraint_pattern.finditer(goal):
        name, value = match.group(1).strip(), match.group(2).strip().rstrip(".")
        if value:
            found[value.lower()] = "[" + "_".join(w.title() for w in name.split()) + "]"
    return found


class Abstractor:
    """Assigns one placeholder per concrete value, stable across one episode."""

    def __init__(self, semantics: ActionSemantics, goal: str, target: str | None = None):
        self.semantics = semantics
        self.target = target
        self.constraints = goal_constraints(goal, semantics)
        self._object_numbers: dict[str, int] = {}
        self._by_value: dict[str, str] = {}
        self._primed: dict[str, str] = {}

    def prime(self, steps: Iterable[AnalysedStep]) -> None:
        """Give each value its most specific role over the episode: the microwave one goes to
        is the `[Appliance]` it heats with, not a generic `[Location]`."""
        for step in steps:
            if step.rule is None or not step.effective:
                continue
            for name in _FIELD_NAME.findall(step.rule.phrase):
                value = step.fields.get(name)
                if isinstance(value, str) and value:
                    role = self.role_of(name, step.rule)
                    if value not in self._primed or self._primed[value] in _GENERIC_ROLES:
                        self._primed[value] = role

    def role_of(self, field_name: str, rule: ActionRule | None) -> str:
        if rule is not None and field_name in rule.roles:
            return rule.roles[field_name]
        return self.semantics.roles.get(field_name, field_name.title())

    def placeholder(self, field_name: str, value: str, rule: ActionRule | None) -> str:
        if value.lower() in self.constraints:
            return self.constraints[value.lower()]
        if self.target is not None and value == self.target:
            return f"[{self.semantics.target_role}]"
        if value in self._by_value:
            return self._by_value[value]
        role = self._primed.get(value) or self.role_of(field_name, rule)
        if role in _NUMBERED_ROLES:
            number = self._object_numbers.setdefault(type_of(value), len(self._object_numbers) + 1)
            text = f"[{role}_{number}]"
        else:
            text = f"[{role}]"
        self._by_value.setdefault(value, text)
        return text

    def phrase(self, step: AnalysedStep) -> str:
        """The rule's planning phrase for this step, fields replaced by placeholders."""
        if step.rule is None or not step.rule.phrase:
            return ""
        values: dict[str, str] = {}
        for name in _FIELD_NAME.findall(step.rule.phrase):
            value: FieldValue = step.fields.get(name, "")
            text = value if isinstance(value, str) else ", ".join(value)
            values[name] = self.placeholder(name, text, step.rule) if text else f"[{name}]"
        return step.rule.phrase.format(**values)

    def action(self, action: str, step: AnalysedStep | None = None) -> str:
        """The action as a memory shows it: instance numbers and constraint values abstracted."""
        text = action
        for pattern, replacement in self.semantics.action_abstractions:
            text = pattern.sub(replacement, text)
        for value, placeholder in sorted(self.constraints.items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"(?<=\[){re.escape(value)}(?=\])", placeholder, text, flags=re.I)
        return text

    def text(self, text: str) -> str:
        """Free text with every value seen so far replaced by its placeholder."""
        for value, placeholder in sorted(self._by_value.items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"\b{re.escape(value)}\b", placeholder, text)
        for pattern, replacement in self.semantics.action_abstractions:
            text = pattern.sub(replacement, text)
        return text


def planning_pattern(steps: Iterable[AnalysedStep], abstractor: Abstractor) -> str:
    """`A -> B -> C` from the kept steps' phrases, consecutive repeats merged."""
    phrases: list[str] = []
    for step in steps:
        phrase = abstractor.phrase(step)
        if phrase and (not phrases or phrases[-1] != phrase):
            phrases.append(phrase)
    return " -> ".join(phrases)


def register_values(steps: Sequence[AnalysedStep], abstractor: Abstractor) -> None:
    """Number objects in order of appearance over the whole episode (for failure memories)."""
    abstractor.prime(steps)
    for step in steps:
        abstractor.phrase(step)
