"""Backward causal chaining: which steps of a won episode the win actually depended on.

A forward pass reads every step through the environment's `ActionSemantics`: which rule the
action matches, whether it had any effect, and which facts it needs and provides given the
state the agent was in (where it stood, what it held, which product page was open). A backward
pass then starts from the goal step and, for every fact a necessary step needs, marks the
latest earlier effective step that provided it as necessary too. Steps nothing depends on
(detours, inspections, re-opened containers, actions that did nothing) drop out.

A needed fact nobody provided is taken as true from the start (a receptacle that was never
closed needs no `open`), which is what keeps the rules short.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from string import Formatter

from skillsft.pipeline.envs.action_semantics import ActionRule, ActionSemantics, match_rule

_INSTANCE_SUFFIX = re.compile(r"\s+\d+$")
_FORMATTER = Formatter()

FieldValue = str | tuple[str, ...]


def type_of(value: str) -> str:
    """`tomato 2` -> `tomato`: the object or receptacle type without its instance number."""
    return _INSTANCE_SUFFIX.sub("", value)


@dataclass(frozen=True)
class AnalysedStep:
    index: int
    action: str
    observation: str
    rule: ActionRule | None
    fields: dict[str, FieldValue]
    effective: bool
    needs: tuple[str, ...]
    provides: tuple[str, ...]


@dataclass
class Dependency:
    """Why a step was kept: the facts it provided and the later steps that needed them."""

    needed_by: list[tuple[str, int]] = field(default_factory=list)


def expand(template: str, fields: dict[str, FieldValue]) -> list[str]:
    """Format one fact template; [] when a field is missing or empty, one fact per tuple item."""
    names = [name for _, name, _, _ in _FORMATTER.parse(template) if name]
    values: list[dict[str, str]] = [{}]
    for name in names:
        value = fields.get(name)
        if not value:
            return []
        options = value if isinstance(value, tuple) else (value,)
        values = [{**combo, name: option} for combo in values for option in options]
    return [template.format(**combo) for combo in values]


def _with_types(fields: dict[str, FieldValue]) -> dict[str, FieldValue]:
    typed = dict(fields)
    for name, value in fields.items():
        if isinstance(value, str) and value:
            typed[f"{name}_type"] = type_of(value)
    return typed


def _apply_updates(state: dict[str, FieldValue], rule: ActionRule, fields: dict[str, FieldValue]):
    for key, template in rule.updates.items():
        if template == "":
            state[key] = () if isinstance(state.get(key), tuple) else ""
        elif template.startswith("+"):
            current = state.get(key) or ()
            added = expand(template[1:], fields)
            state[key] = (*(current if isinstance(current, tuple) else ()), *added)
        else:
            values = expand(template, fields)
            state[key] = values[0] if values else ""


def analyse(
    steps: Sequence[tuple[str | None, str]], semantics: ActionSemantics
) -> list[AnalysedStep]:
    """Forward pass over (action, observation) pairs; a None action is the initial state."""
    state: dict[str, FieldValue] = {"here": "", "held": "", "item": "", "options": ()}
    analysed: list[AnalysedStep] = []
    for index, (action, observation) in enumerate(steps):
        matched = match_rule(action, semantics) if action else None
        no_effect = observation.strip() in semantics.no_effect_observations
        if matched is None or no_effect:
            # Rejected actions keep their fields so mistakes can name them with placeholders.
            fields = _with_types({**state, **(matched[1] if matched else {})})
            analysed.append(AnalysedStep(index, action or "", observation, matched and matched[0],
                                         fields, False, (), ()))
            continue
        rule, groups = matched
        fields = _with_types({**state, **groups})
        needs = tuple(fact for t in rule.needs for fact in expand(t, fields))
        provides = tuple(fact for t in rule.provides for fact in expand(t, fields))
        analysed.append(AnalysedStep(index, action or "", observation, rule, fields, True,
                                     needs, provides))
        _apply_updates(state, rule, fields)
    return analysed


def goal_needs(step: AnalysedStep, goal: str, semantics: ActionSemantics) -> tuple[str, ...]:
    """Facts the goal wants beyond the winning action (the object must be clean, two placed)."""
    extra: list[str] = []
    for requirement in semantics.goal_requirements:
        if requirement.goal_pattern.search(goal):
            extra.extend(expand(requirement.fact, step.fields))
    return tuple(extra)


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


# Words a query shares with any text and so never identify a bridge entity.
_STOPWORDS = frozenset(re.findall(r"\w+", (
    "a an and are as at be by did does for from has have how in is it of on or the to was "
    "were what when where which who whom whose why with")))


def _content_words(text: str) -> set[str]:
    return {w for w in _normalise(text).split() if len(w) > 2 and w not in _STOPWORDS}


def providers(fact: str, before: int, analysed: Sequence[AnalysedStep],
              goal: str = "") -> list[int]:
    """Which earlier steps establish `fact`: the latest provider; for `seen:` facts every step
    whose observation mentions the value (falling back to the latest observation); for
    `bridge:` facts (a query) the latest step whose observation revealed one of the query's
    words that the goal does not contain (the bridge entity of a multi-hop question)."""
    earlier = [s for s in analysed[:before] if s.effective]
    if fact.startswith("bridge:"):
        new_words = _content_words(fact.removeprefix("bridge:")) - _content_words(goal)
        for step in reversed(earlier):
            if new_words & _content_words(step.observation):
                return [step.index]
        return []
    if fact.startswith("seen:"):
        wanted = _normalise(fact.removeprefix("seen:"))
        hits = [s.index for s in earlier if wanted and wanted in _normalise(s.observation)]
        if hits:
            return hits
        with_text = [s.index for s in earlier if s.observation.strip()]
        return with_text[-1:]
    for step in reversed(earlier):
        if fact in step.provides:
            return [step.index]
    return []


def chain_backward(
    analysed: Sequence[AnalysedStep], goal_index: int, goal: str, semantics: ActionSemantics
) -> dict[int, Dependency]:
    """The necessary steps (goal step included) and, for each, what later step needed it."""
    goal_step = analysed[goal_index]
    kept: dict[int, Dependency] = {goal_index: Dependency()}
    queue = [(goal_index, goal_step.needs + goal_needs(goal_step, goal, semantics))]
    while queue:
        index, needs = queue.pop()
        for fact in needs:
            for provider in providers(fact, index, analysed, goal):
                if provider not in kept:
                    kept[provider] = Dependency()
                    queue.append((provider, analysed[provider].needs))
                kept[provider].needed_by.append((fact, index))
    return dict(sorted(kept.items()))


def goal_step_index(analysed: Sequence[AnalysedStep], won_index: int | None) -> int | None:
    """The winning step when known, else the last effective step (a won episode whose win
    marker was lost); None when nothing in the episode had any effect."""
    if won_index is not None:
        return won_index
    effective = [s.index for s in analysed if s.effective]
    return effective[-1] if effective else None
