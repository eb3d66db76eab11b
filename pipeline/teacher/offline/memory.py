"""The offline teacher's memories: deterministic answers from the trajectory alone.

Backward causal chaining (pipeline/causal.py) gives the refined trajectory, placeholders
(pipeline/placeholders.py) the planning pattern, detectors (pipeline/mistakes.py) the mistakes;
all three read the environment's `ActionSemantics` tables, never its name.
"""

from collections.abc import Sequence

from skillsft.pipeline.causal import AnalysedStep, analyse, chain_backward, goal_step_index
from skillsft.pipeline.memories import MemoryContext
from skillsft.pipeline.mistakes import EpisodeView, detect_mistakes
from skillsft.pipeline.placeholders import Abstractor, planning_pattern, register_values
from skillsft.schemas.memory_answers import MemoryAnswer, MistakeAnswer, RefinedStepAnswer


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
        contextual_description=(
            f"{ctx.spec.memory_environment_tag} task classified as '{ctx.category}' to "
            f"{abstractor.action(ctx.goal)}. Solved in {len(kept)} necessary step(s) of "
            f"{sum(1 for s in analysed if s.action)} by: {summary}."
        ),
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
    return MemoryAnswer(
        contextual_description=(
            f"{ctx.spec.memory_environment_tag} task classified as '{ctx.category}' to "
            f"{abstractor.action(ctx.goal)}. Unsolved: {mistakes[0].bad_action[0].lower()}"
            f"{mistakes[0].bad_action[1:]}."
        ),
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
