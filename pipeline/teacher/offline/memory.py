"""The offline teacher's memories: deterministic answers from the trajectory alone.

Backward causal chaining (causal.py, beside this module) gives the refined trajectory,
placeholders (placeholders.py) the planning pattern, detectors (mistakes.py) the mistakes; all
three read the environment's `ActionSemantics` tables, never its name.
"""

import re
from collections.abc import Sequence

from skillsft.pipeline.teacher.contexts import MemoryContext
from skillsft.pipeline.teacher.offline.causal import (
    AnalysedStep,
    analyse,
    chain_backward,
    goal_step_index,
)
from skillsft.pipeline.teacher.offline.mistakes import EpisodeView, detect_mistakes
from skillsft.pipeline.teacher.offline.placeholders import (
    Abstractor,
    goal_constraints,
    planning_pattern,
    register_values,
)
from skillsft.schemas.memory_answers import MemoryAnswer, MistakeAnswer, RefinedStepAnswer


def _constraint_kinds(ctx: MemoryContext) -> str:
    """`size, color and price`: the kinds of constraint the goal sets, never their values."""
    semantics = ctx.spec.action_semantics
    kinds = [p.strip("[]").replace("_", " ").lower()
             for p in dict.fromkeys(goal_constraints(ctx.goal, semantics).values())] if (
        semantics) else []
    if re.search(r"\bprice\b", ctx.goal, re.I) and "price" not in kinds:
        kinds.append("price")
    if not kinds:
        return "no stated"
    return kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " and " + kinds[-1]


def _describe(ctx: MemoryContext, abstractor: Abstractor, form: str, **fields: str) -> str:
    """The description in the environment's form (its PromptProfile), filled from the data."""
    profile = ctx.spec.prompts
    template = getattr(profile, form) if profile else "{goal}: {summary}{cause}."
    values = {"category": ctx.category, "label": ctx.spec.label(ctx.category).lower(),
              "goal": abstractor.action(ctx.goal), "constraints": _constraint_kinds(ctx),
              "summary": "", "cause": "", **fields}
    return template.format(**values).replace("..", ".")


def _first_sentences(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _fact_phrase(fact: str, ctx: MemoryContext, abstractor: Abstractor) -> str:
    kind, _, rest = fact.partition(":")
    args = [abstractor.action(part) for part in rest.split(":")]
    semantics = ctx.spec.action_semantics
    template = semantics.fact_phrases.get(kind) if semantics else None
    return template.format(*args) if template else fact


def _refined_steps(ctx: MemoryContext, analysed: Sequence[AnalysedStep], kept: dict,
                   abstractor: Abstractor) -> list[RefinedStepAnswer]:
    refined = []
    for index, dependency in kept.items():
        step = analysed[index]
        if dependency.needed_by:
            reasons = []
            for fact, later in dependency.needed_by:
                later_action = abstractor.action(analysed[later].action)
                reason = (f"{_fact_phrase(fact, ctx, abstractor)} is needed by step "
                          f"{ctx.step_numbers[later]} ({later_action})")
                if reason not in reasons:
                    reasons.append(reason)
            reasoning = "Kept because " + "; ".join(reasons) + "."
        else:
            reasoning = "This step completes the goal."
        refined.append(RefinedStepAnswer(
            step_index=ctx.step_numbers[index],
            action=abstractor.action(step.action),
            critical_observation=abstractor.action(_first_sentences(step.observation)),
            reasoning=reasoning,
        ))
    return refined


def _solve_success(ctx: MemoryContext, analysed: list[AnalysedStep]) -> MemoryAnswer:
    semantics = ctx.spec.action_semantics
    goal_index = goal_step_index(analysed, ctx.won_index)
    if semantics is None or goal_index is None:
        raise ValueError("no effective step to chain back from")
    target = analysed[goal_index].fields.get(semantics.target_field)
    abstractor = Abstractor(semantics, ctx.goal, target if isinstance(target, str) else None)
    kept = chain_backward(analysed, goal_index, ctx.goal, semantics)
    steps = [analysed[i] for i in kept]
    abstractor.prime(steps)
    pattern = planning_pattern(steps, abstractor)
    phrases = [p[:1].lower() + p[1:] for p in pattern.split(" -> ")] if pattern else []
    summary = ", then ".join(phrases) or "following the goal"
    return MemoryAnswer(
        contextual_description=_describe(ctx, abstractor, "offline_success", summary=summary),
        refined_trajectory=_refined_steps(ctx, analysed, kept, abstractor),
        planning_pattern=pattern or None,
    )


def _solve_failure(ctx: MemoryContext, analysed: list[AnalysedStep]) -> MemoryAnswer:
    semantics = ctx.spec.action_semantics
    if semantics is None:
        raise ValueError("the environment has no action semantics for offline mistakes")
    abstractor = Abstractor(semantics, ctx.goal)
    register_values(analysed, abstractor)
    view = EpisodeView(analysed, ctx.admissible_before, ctx.ended_by_limit, ctx.goal, semantics,
                       abstractor)
    mistakes = [MistakeAnswer(trigger_condition=t, bad_action=b) for t, b in detect_mistakes(view)]
    cause = mistakes[0].bad_action
    return MemoryAnswer(
        contextual_description=_describe(ctx, abstractor, "offline_failure",
                                         cause=cause[:1].lower() + cause[1:]),
        mistakes_to_avoid=mistakes,
    )


def solve_memory(ctx: MemoryContext) -> MemoryAnswer:
    """Deterministic memory from the trajectory alone (see module docstring)."""
    semantics = ctx.spec.action_semantics
    if semantics is None:
        raise ValueError(f"environment {ctx.spec.name!r} has no action semantics")
    analysed = analyse(ctx.steps, semantics)
    if ctx.outcome == "Success":
        return _solve_success(ctx, analysed)
    return _solve_failure(ctx, analysed)
