"""What the offline teacher's thoughts may rely on about a situation: the goal's words and
object, and what the agent holds before each step (from the environment's action tables).

The thoughts solver (thoughts.py) reads these so that no thought contradicts the observation it
follows; the check that none does, claim by claim, is scripts/thought_claims.py (run by the
offline teacher's tests on every turn of the samples, and by scripts/teacher_check.py on any
corpus, whoever wrote it).
"""

import re
from collections.abc import Sequence

from skillsft.pipeline.envs.action_semantics import ActionSemantics
from skillsft.pipeline.teacher.offline.causal import analyse, type_of


def goal_words(goal: str) -> set[str]:
    return set(re.findall(r"[a-z]+", goal.lower()))


def goal_target(goal: str, actions: Sequence[str]) -> str:
    """The goal's object: the kind of the first object taken that the goal names (so the
    destination, also named by the goal, is not mistaken for it)."""
    words = goal_words(goal)
    for action in actions:
        found = re.match(r"take (.+?) from ", action.strip(), re.I)
        if found and type_of(found.group(1)).split()[-1] in words:
            return type_of(found.group(1))
    return ""


def held_before_each_step(actions: Sequence[str], observations_after: Sequence[str],
                          semantics: ActionSemantics | None) -> list[str]:
    """What the agent holds before each action, from the environment's action tables."""
    if semantics is None:
        return ["" for _ in actions]
    analysed = analyse(list(zip(actions, observations_after, strict=True)), semantics)
    return [str(step.fields.get("held") or "") for step in analysed]
