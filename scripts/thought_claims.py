"""Does a thought contradict the observation it follows? Claims a thought makes, checked as data.

A thought is written before its action, after reading the current observation; it must not say
something that observation (or the agent's own earlier actions) shows to be false: "I have not
found what I need" while the goal's object is in hand or on screen, "I am holding the mug" with
empty hands, "the drawer is closed" right after it was opened, "the task is complete" before the
last step. Each `Claim` is a regex over the thought and a test over the `Situation`; the
environment supplies only its `ActionSemantics` (what the agent holds), never its name.

Used by the offline teacher's tests on every turn of the samples (loaded by path, as
tests/test_layers.py loads layout_report.py), and by the held-out check
(scripts/teacher_check.py) on any corpus, whoever wrote it. Not part of the package: what the
offline teacher itself needs of a situation is pipeline/teacher/offline/thought_checks.py.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skillsft.pipeline.envs.action_semantics import ActionSemantics
from skillsft.pipeline.teacher.offline.causal import type_of
from skillsft.pipeline.teacher.offline.thought_checks import (
    goal_target,
    goal_words,
    held_before_each_step,
)


@dataclass(frozen=True)
class Situation:
    goal: str
    observation: str  # what the agent reads before acting
    action: str
    held: str  # the object in hand before the action ("" when none)
    final: bool  # the episode's last step
    target: str = ""  # the kind of object the goal is about ("tomato"), "" when unknown


@dataclass(frozen=True)
class Contradiction:
    step: int
    claim: str
    thought: str


def target_visible(situation: Situation) -> bool:
    """Whether the observation lists the goal's object (`a tomato 2`)."""
    if not situation.target:
        return False
    listed = re.findall(r"\ban? ([a-z]+(?: [a-z]+)?) \d+", situation.observation.lower())
    return situation.target in {type_of(x) for x in listed} or any(
        x.endswith(" " + situation.target) or x == situation.target for x in listed)


def _holding_goal_object(situation: Situation) -> bool:
    return bool(situation.held) and type_of(situation.held).split()[-1] in goal_words(
        situation.goal)


def _not_found_is_false(situation: Situation, _: re.Match[str]) -> bool:
    return _holding_goal_object(situation) or (not situation.held and target_visible(situation))


def _holding_is_false(situation: Situation, match: re.Match[str]) -> bool:
    claimed = (match.group("obj") or match.group("obj2")).lower()
    return not situation.held or claimed not in situation.held.lower()


def _closed_is_false(situation: Situation, match: re.Match[str]) -> bool:
    thing = re.escape(match.group("thing").lower())
    text = situation.observation.lower()
    return bool(re.search(rf"\b{thing} is open\b|you open the {thing}\b", text))


def _done_is_false(situation: Situation, _: re.Match[str]) -> bool:
    return not situation.final


@dataclass(frozen=True)
class Claim:
    name: str
    pattern: re.Pattern[str]
    is_false: Callable[[Situation, re.Match[str]], bool]


CLAIMS: tuple[Claim, ...] = (
    Claim("not_found", re.compile(
        r"\b(have not|haven't|not yet) (found|seen)\b|\bnot found what I need\b", re.I),
        _not_found_is_false),
    Claim("holding", re.compile(
        r"\bI am (?:holding|carrying) (?:the |a |an )(?P<obj>[a-z]+)|\bwith the "
        r"(?P<obj2>[a-z]+) in hand\b", re.I),
        _holding_is_false),
    Claim("closed", re.compile(r"\bthe (?P<thing>[a-z]+(?: \d+)?) is closed\b", re.I),
          _closed_is_false),
    Claim("done", re.compile(r"\btask is complete\b|\bdeclare (?:it|the task) done\b", re.I),
          _done_is_false),
)


def find_contradictions(goal: str, turns: Sequence[tuple[str, str, str]],
                        semantics: ActionSemantics | None) -> list[Contradiction]:
    """Every claim a thought makes that its situation shows false. `turns` are
    (observation before the action, action, thought), in order."""
    actions = [action for _, action, _ in turns]
    after = [obs for obs, _, _ in turns[1:]] + [""]
    held = held_before_each_step(actions, after, semantics)
    target = goal_target(goal, actions)
    found = []
    for index, (observation, action, thought) in enumerate(turns):
        situation = Situation(goal, observation, action, held[index], index == len(turns) - 1,
                              target)
        for claim in CLAIMS:
            for match in claim.pattern.finditer(thought):
                if claim.is_false(situation, match):
                    found.append(Contradiction(index, claim.name, thought))
    return found
