"""Stage 2a: one skill memory per selected trajectory (FORMATS.md section 4).

For each trajectory we build a `TeacherRequest` (our own prompt, versioned) carrying a
`MemoryContext` as offline context. The OpenAI teacher answers from the prompt; the offline
teacher answers from the context with `solve_memory`, which is deterministic: backward causal
chaining for the refined trajectory, placeholders for the planning pattern, detectors for the
mistakes. Either way the answer is turned into a `Memory` by us, with an id derived from the
env id and the trajectory content, so a re-run produces the same file.

A trajectory that cannot become a memory (malformed record, teacher failure, an answer missing
its success or failure half) is a `MemoryFailure` with env id and reason, counted; the stage
raises only when failures exceed `failure_threshold` of the attempts.
"""

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError
from skillsft.pipeline.causal import AnalysedStep, analyse, chain_backward, goal_step_index
from skillsft.pipeline.envs import EnvSpec
from skillsft.pipeline.errors import TooManyFailures, check_failure_rate
from skillsft.pipeline.mistakes import EpisodeView, detect_mistakes
from skillsft.pipeline.placeholders import Abstractor, planning_pattern, register_values
from skillsft.pipeline.teacher.base import (
    BatchStats,
    Teacher,
    TeacherRequest,
    register_offline_solver,
)
from skillsft.schemas.answer_bounds import bounded_answer_model
from skillsft.schemas.memory import (
    Memory,
    MemoryContent,
    MemoryTags,
    MistakeToAvoid,
    RefinedStep,
    StrategicGuidelines,
    TaskMeta,
)
from skillsft.schemas.memory_answers import (
    MEMORY_ANSWER_BY_OUTCOME,
    MemoryAnswer,
    MistakeAnswer,
    RefinedStepAnswer,
)
from skillsft.schemas.trajectory import SearchTrajectorySet, TrajectorySet

MEMORY_KIND = "memory"
# Bump when the prompt text below changes: the version is part of every journal key.
PROMPT_VERSIONS = {MEMORY_KIND: "memory-v2"}
STAGE = "memories"


class MemoryStageError(TooManyFailures):
    """Too many trajectories failed to become memories for the stage to be trusted."""


@dataclass(frozen=True)
class MemoryOptions:
    all_trajectories: bool = False  # default: the first trajectory of each env
    failure_threshold: float = 0.10
    observation_chars: int = 300  # per step, in the prompt
    max_prompt_steps: int = 60  # longer trajectories keep their head and tail


@dataclass(frozen=True)
class MemoryFailure:
    env_id: str
    trajectory_index: int
    reason: str
    detail: str = ""


@dataclass
class MemoryResult:
    memories: list[Memory]
    failures: list[MemoryFailure]
    counts: dict[str, int]
    stats: BatchStats


@dataclass(frozen=True)
class MemoryContext:
    """Everything a memory is derived from; the offline teacher's only input."""

    spec: EnvSpec
    env_id: str
    trajectory_index: int
    goal: str
    category: str
    outcome: str  # "Success" | "Failure"
    data_source: str | None
    steps: tuple[tuple[str | None, str], ...]  # (action, observation); None = initial state
    step_numbers: tuple[int, ...]
    admissible_before: tuple[tuple[str, ...], ...]
    won_index: int | None
    ended_by_limit: bool

    @property
    def memory_id(self) -> str:
        content = orjson.dumps([self.env_id, self.goal, self.steps])
        return f"mem_{self.spec.name}_{hashlib.sha256(content).hexdigest()[:8]}"


_STEP_NUMBER = re.compile(r"-?\d+")


def _step_number(step_id: str, position: int) -> int:
    found = _STEP_NUMBER.search(step_id)
    return int(found.group()) if found else position


def build_context(
    record: TrajectorySet | SearchTrajectorySet, index: int, spec: EnvSpec
) -> MemoryContext:
    """Read one trajectory of a stage-1 record; ValueError says why it cannot be used."""
    steps = record.trajectories[index]
    if not any(step.action for step in steps):
        raise ValueError("trajectory has no actions")
    won = next((i for i, s in enumerate(steps) if s.done and s.reward >= spec.win_reward), None)
    recorded = getattr(record, "outcome", None)
    outcome = recorded or ("Success" if won is not None else "Failure")
    data_source = getattr(record, "data_source", None)
    admissible: list[tuple[str, ...]] = [()]
    admissible += [tuple(s.admissible_actions) for s in steps[:-1]]
    return MemoryContext(
        spec=spec,
        env_id=record.env_id,
        trajectory_index=index,
        goal=record.task.strip().rstrip("."),
        category=spec.classify_task(record.task, data_source),
        outcome=outcome,
        data_source=data_source,
        steps=tuple((s.action, s.observation) for s in steps),
        step_numbers=tuple(_step_number(s.step_id, i) for i, s in enumerate(steps)),
        admissible_before=tuple(admissible),
        won_index=won,
        ended_by_limit=outcome == "Failure" and steps[-1].done and recorded is None,
    )


# ---------------------------------------------------------------------------------------------
# The prompt (what an LLM teacher reads)

_SYSTEM_PROMPT = """\
You turn one agent trajectory into a reusable skill memory for future agents in the same \
environment. Answer with one JSON object and nothing else:
{"contextual_description": str,
 "refined_trajectory": [{"step_index": int, "action": str, "critical_observation": str, \
"reasoning": str}] | null,
 "planning_pattern": str | null,
 "mistakes_to_avoid": [{"trigger_condition": str, "bad_action": str}]}
Rules:
- contextual_description: the task category, the goal without instance numbers, and one \
clause on how the episode was solved or why it failed.
- For a SUCCESS: refined_trajectory keeps only the steps the final success causally depends \
on. Work backwards from the winning step: keep a step only if a later kept step needs its \
effect (being at a place, holding an object, an opened container, a changed object state, a \
selected option, retrieved evidence). Drop detours, inspections and actions that did nothing. \
Use the original step_index values. planning_pattern is "A -> B -> C" with placeholders \
([Object_1], [Location], [Target_Location], ...) and no instance numbers or concrete values. \
mistakes_to_avoid may be empty.
- For a FAILURE: refined_trajectory and planning_pattern are null; mistakes_to_avoid lists \
the concrete errors visible in the trajectory (rejected or inadmissible actions, repeated \
cycles, missing evidence, wasting the step budget), each with the situation that triggers it, \
using placeholders instead of instance numbers.
- Never invent steps that are not in the trajectory."""


def _render_steps(ctx: MemoryContext, options: MemoryOptions) -> str:
    lines = []
    for number, (action, observation) in zip(ctx.step_numbers, ctx.steps, strict=True):
        obs = " ".join(observation.split())
        if len(obs) > options.observation_chars:
            obs = obs[: options.observation_chars] + " ..."
        lines.append(f"[{number}] action: {action or '(start)'} | observation: {obs}")
    if len(lines) > options.max_prompt_steps:
        head = options.max_prompt_steps // 2
        tail = options.max_prompt_steps - head
        omitted = len(lines) - head - tail
        lines = [*lines[:head], f"... ({omitted} steps omitted) ...", *lines[-tail:]]
    return "\n".join(lines)


def build_memory_request(
    ctx: MemoryContext, options: MemoryOptions
) -> TeacherRequest[MemoryAnswer]:
    user = (
        f"Environment: {ctx.spec.memory_environment_tag}\n"
        f"Task category: {ctx.category}\n"
        + (f"Data source: {ctx.data_source}\n" if ctx.data_source else "")
        + f"Goal: {ctx.goal}\nOutcome: {ctx.outcome.upper()}\n\nTrajectory:\n"
        + _render_steps(ctx, options)
    )
    return TeacherRequest(
        request_id=f"{ctx.env_id}#{ctx.trajectory_index}",
        kind=MEMORY_KIND,
        messages=({"role": "system", "content": _SYSTEM_PROMPT}, {"role": "user", "content": user}),
        answer_model=bounded_answer_model(
            MEMORY_ANSWER_BY_OUTCOME[ctx.outcome],
            (("mistakes_to_avoid", max(1, len(ctx.step_numbers))),
             ("refined_trajectory", max(1, len(ctx.step_numbers)))),
            ctx.step_numbers,
        ),
        prompt_version=PROMPT_VERSIONS[MEMORY_KIND],
        offline_context=ctx,
    )


# ---------------------------------------------------------------------------------------------
# The offline teacher's answer (what a newcomer gets without an API key)


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


@register_offline_solver(MEMORY_KIND)
def solve_memory(ctx: MemoryContext) -> MemoryAnswer:
    """Deterministic memory from the trajectory alone (see module docstring)."""
    semantics = ctx.spec.action_semantics
    if semantics is None:
        raise ValueError(f"environment {ctx.spec.name!r} has no action semantics")
    analysed = analyse(ctx.steps, semantics)
    if ctx.outcome == "Success":
        return _solve_success(ctx, analysed)
    return _solve_failure(ctx, analysed)


# ---------------------------------------------------------------------------------------------
# Answer -> Memory


def memory_from_answer(ctx: MemoryContext, answer: MemoryAnswer, source: str) -> Memory:
    """Our record for the answer; ValueError when the answer lacks the half its outcome needs."""
    success = ctx.outcome == "Success"
    if success and not (answer.refined_trajectory and answer.planning_pattern):
        raise ValueError("success answer without refined_trajectory and planning_pattern")
    if not success and not answer.mistakes_to_avoid:
        raise ValueError("failure answer without mistakes_to_avoid")
    refined = [RefinedStep(**step.model_dump()) for step in answer.refined_trajectory or []]
    return Memory(
        memory_id=ctx.memory_id,
        contextual_description=answer.contextual_description,
        tags=MemoryTags(environment=ctx.spec.memory_environment_tag, outcome=ctx.outcome,
                        data_source=ctx.data_source),
        content=MemoryContent(
            task_meta=TaskMeta(original_goal=ctx.goal, data_source=ctx.data_source),
            refined_trajectory=refined if success else None,
            strategic_guidelines=StrategicGuidelines(
                planning_pattern=answer.planning_pattern if success else None,
                mistakes_to_avoid=[MistakeToAvoid(**m.model_dump())
                                   for m in answer.mistakes_to_avoid],
            ),
        ),
        origin_env_id=ctx.env_id,
        metadata={"source": source, "category": ctx.category,
                  "trajectory_index": ctx.trajectory_index,
                  "prompt_version": PROMPT_VERSIONS[MEMORY_KIND]},
    )


def _as_record(record: Any) -> TrajectorySet | SearchTrajectorySet:
    if isinstance(record, TrajectorySet | SearchTrajectorySet):
        return record
    search_shaped = isinstance(record, dict) and "outcome" in record
    return (SearchTrajectorySet if search_shaped else TrajectorySet).model_validate(record)


def check_failure_threshold(failures: int, attempts: int, threshold: float, what: str) -> None:
    """The stage's threshold, raised as MemoryStageError (a TooManyFailures)."""
    try:
        check_failure_rate(failures, attempts, threshold, what)
    except TooManyFailures as exc:
        raise MemoryStageError(str(exc)) from None


def generate_memories(
    records: Sequence[Any], spec: EnvSpec, teacher: Teacher, options: MemoryOptions | None = None
) -> MemoryResult:
    """Memories for the selected trajectories of stage-1 records, in input order."""
    options = options or MemoryOptions()
    failures: list[MemoryFailure] = []
    counts: Counter[str] = Counter()
    contexts: list[MemoryContext] = []
    seen_ids: set[str] = set()
    for position, raw in enumerate(records):
        counts["records"] += 1
        try:
            record = _as_record(raw)
        except ValidationError as exc:
            env_id = raw.get("env_id", f"record {position}") if isinstance(raw, dict) else "?"
            first = exc.errors()[0]
            failures.append(MemoryFailure(str(env_id), -1, "invalid_record",
                                          f"{'.'.join(map(str, first['loc']))}: {first['msg']}"))
            continue
        chosen = range(len(record.trajectories)) if options.all_trajectories else range(
            min(1, len(record.trajectories)))
        if not record.trajectories:
            failures.append(MemoryFailure(record.env_id, -1, "no_trajectories"))
        for index in chosen:
            try:
                ctx = build_context(record, index, spec)
            except ValueError as exc:
                failures.append(MemoryFailure(record.env_id, index, "unusable_trajectory",
                                              str(exc)))
                continue
            if ctx.memory_id in seen_ids:
                counts["skipped_duplicate_trajectory"] += 1
                continue
            seen_ids.add(ctx.memory_id)
            contexts.append(ctx)

    requests = [build_memory_request(ctx, options) for ctx in contexts]
    results, stats = teacher.run_batch(requests, stage=STAGE)
    memories: list[Memory] = []
    for ctx, result in zip(contexts, results, strict=True):
        if result.answer is None:
            failures.append(MemoryFailure(ctx.env_id, ctx.trajectory_index, "teacher_error",
                                          result.error or ""))
            continue
        try:
            memory = memory_from_answer(ctx, result.answer, teacher.name)
        except ValueError as exc:
            failures.append(MemoryFailure(ctx.env_id, ctx.trajectory_index, "incomplete_answer",
                                          str(exc)))
            continue
        memories.append(memory)
        counts[f"memories_{ctx.outcome.lower()}"] += 1

    counts["requests"] = len(requests)
    counts["memories"] = len(memories)
    for failure in failures:
        counts[f"failed_{failure.reason}"] += 1
    attempts = len(contexts) + sum(1 for f in failures if f.reason != "teacher_error"
                                   and f.reason != "incomplete_answer")
    if failures:
        listed = "; ".join(f"{f.env_id}#{f.trajectory_index}: {f.reason} {f.detail}".strip()
                           for f in failures[:5])
        try:
            check_failure_threshold(len(failures), attempts, options.failure_threshold,
                                    "trajectories")
        except MemoryStageError as exc:
            raise MemoryStageError(f"{exc}. First failures: {listed}") from None
    return MemoryResult(memories, failures, dict(sorted(counts.items())), stats)
