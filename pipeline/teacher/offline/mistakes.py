"""Mistakes a failed episode shows, found from the trajectory alone (the offline teacher).

Each detector looks for one failure signature that is visible without an LLM: actions the
environment rejected (`Nothing happens.`), actions outside the admissible list, the same
action repeated over and over, missing evidence before a goal step, and running out of steps.
Detectors return `(trigger_condition, bad_action)` pairs already abstracted with the episode's
placeholders, so the mistake transfers to other scenes.
"""

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skillsft.pipeline.envs.action_semantics import ActionSemantics
from skillsft.pipeline.teacher.offline.causal import AnalysedStep, providers
from skillsft.pipeline.teacher.offline.placeholders import Abstractor


@dataclass(frozen=True)
class EpisodeView:
    """What the detectors read: the analysed steps plus what the writer recorded."""

    steps: Sequence[AnalysedStep]
    admissible_before: Sequence[Sequence[str]]  # the list the agent saw before each step
    ended_by_limit: bool
    goal: str
    semantics: ActionSemantics
    abstractor: Abstractor


Mistake = tuple[str, str]
REPEAT_THRESHOLD = 3


def _quote(view: EpisodeView, step: AnalysedStep) -> str:
    return view.abstractor.action(view.abstractor.text(step.action))


def rejected_actions(view: EpisodeView) -> list[Mistake]:
    rejected = [s for s in view.steps if s.action and s.observation.strip()
                in view.semantics.no_effect_observations]
    by_action = Counter(_quote(view, s) for s in rejected)
    reply = next(iter(sorted(view.semantics.no_effect_observations)), "")
    return [(f"'{action}' is not among the admissible actions of the current situation "
             f"(the environment answered '{reply}' {count} time(s) in this episode)",
             f"Issuing '{action}' anyway instead of choosing an action from the admissible list")
            for action, count in by_action.most_common(2)]


def inadmissible_actions(view: EpisodeView) -> list[Mistake]:
    free = view.semantics.free_text_actions
    found: Counter[str] = Counter()
    for step, admissible in zip(view.steps, view.admissible_before, strict=True):
        if (not step.action or not admissible or step.action in admissible
                or (free is not None and free.match(step.action))
                or step.observation.strip() in view.semantics.no_effect_observations):
            continue
        found[_quote(view, step)] += 1
    return [("The admissible action list does not contain the action the agent has in mind",
             f"Sending '{action}', an action outside the admissible list ({count} time(s))")
            for action, count in found.most_common(2)]


def repeated_actions(view: EpisodeView) -> list[Mistake]:
    counts = Counter(s.action for s in view.steps if s.action)
    mistakes: list[Mistake] = []
    quoted: set[str] = set()
    for action, count in counts.most_common():
        step = next(s for s in view.steps if s.action == action)
        text = _quote(view, step)
        if count < REPEAT_THRESHOLD or text in quoted:
            continue
        quoted.add(text)
        mistakes.append((
            f"'{text}' has already been done at the same place and its outcome is known",
            f"Repeating the identical action '{text}' ({count} times in one episode) instead of "
            "trying an unexplored option"))
    return mistakes[:2]


def missing_evidence(view: EpisodeView) -> list[Mistake]:
    kinds = view.semantics.evidence_kinds
    mistakes = []
    for step in view.steps:
        for fact in step.needs:
            kind, _, value = fact.partition(":")
            if kind not in kinds:
                continue
            hits = [i for i in providers(fact, step.index, view.steps)
                    if value.lower() in view.steps[i].observation.lower()]
            if not hits:
                # The candidate is never quoted: a wrong answer is no lesson for other tasks.
                mistakes.append((
                    "The information retrieved so far does not mention the candidate answer",
                    "Committing to an answer without evidence for it instead of searching "
                    "again with a more specific query"))
    return mistakes[:1]


def wrong_final_choice(view: EpisodeView) -> list[Mistake]:
    """A failed episode that ended with a purchase or an answer chose wrongly."""
    last = next((s for s in reversed(view.steps) if s.action), None)
    trigger, bad = view.semantics.wrong_final_choice
    if last is None or last.rule is None or not trigger or view.ended_by_limit:
        return []
    return [(trigger, bad)] if last.rule.name in view.semantics.terminal_rules else []


def step_limit(view: EpisodeView) -> list[Mistake]:
    if not view.ended_by_limit:
        return []
    last = [s for s in view.steps if s.action][-3:]
    tail = " -> ".join(_quote(view, s) for s in last)
    return [(f"Many steps have passed and the goal '{view.abstractor.text(view.goal)}' is "
             "still not achieved",
             f"Spending the remaining step budget on actions that do not advance the goal "
             f"(the episode ended with: {tail})")]


DETECTORS: tuple[Callable[[EpisodeView], list[Mistake]], ...] = (
    rejected_actions, inadmissible_actions, repeated_actions, wrong_final_choice,
    missing_evidence, step_limit,
)


def detect_mistakes(view: EpisodeView) -> list[Mistake]:
    """Every detector's findings in a fixed order, deduplicated; never empty for a failure."""
    found: list[Mistake] = []
    for detector in DETECTORS:
        for mistake in detector(view):
            if mistake not in found:
                found.append(mistake)
    if not found:
        last = next((s for s in reversed(view.steps) if s.action), None)
        ending = f"'{_quote(view, last)}'" if last else "no action"
        found.append((f"The goal '{view.abstractor.text(view.goal)}' is not yet achieved",
                      f"Ending the episode with {ending} before the goal conditions hold"))
    return found
