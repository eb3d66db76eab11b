"""Stage 2a: one skill memory per selected trajectory (FORMATS.md section 4).

For each trajectory we build a `TeacherRequest` of the `memory` kind (teacher/kinds.py: our own
prompt, versioned) carrying a `MemoryContext` (teacher/contexts.py) as offline context. The
OpenAI teacher answers from the prompt; the offline teacher answers from the context with
`solve_memory`, which is deterministic: backward causal chaining for the refined trajectory,
placeholders for the planning pattern, detectors for the mistakes. Either way the answer is
turned into a `Memory` by us, with an id derived from the env id and the trajectory content, so
a re-run produces the same file.

A trajectory that cannot become a memory (a record without trajectories, teacher failure, an
answer missing its success or failure half) is a `Reject` with env id, trajectory and reason,
counted; whether too many failed is decided once for every stage (stages/outcome.py). The unit
is the trajectory: `inputs` are the trajectories tried, `rejected` those that failed.
"""

import re
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated

from skillsft.pipeline.envs import EnvSpec
from skillsft.pipeline.envs.action_semantics import match_rule
from skillsft.pipeline.envs.prompt_profiles import PromptProfile
from skillsft.pipeline.formats.record_files import as_trajectory_record
from skillsft.pipeline.formats.token_lengths import CHARS_PER_TOKEN
from skillsft.pipeline.options import Opt
from skillsft.pipeline.stages.result import RejectPhase, StageResult, stage_counts
from skillsft.pipeline.teacher.base import (
    Teacher,
    TeacherRequest,
    answer_stream,
)
from skillsft.pipeline.teacher.contexts import MemoryContext
from skillsft.pipeline.teacher.kinds import MEMORY
from skillsft.schemas import Reject
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
)
from skillsft.schemas.trajectory import SearchTrajectorySet, TrajectorySet

MEMORY_KIND = MEMORY.name
# The prompt version lives in the kind table (teacher/kinds.py): bump it there when the prompt
# text below changes, since the version is part of every journal key.
PROMPT_VERSIONS = {MEMORY_KIND: MEMORY.prompt_version}
MIN_MISTAKES_BOUND = 3  # the answer schema admits at least this many mistakes
STAGE = "memories"


@dataclass(frozen=True)
class MemoryOptions:
    # default: the first trajectory of each env
    all_trajectories: Annotated[bool, Opt("one memory per kept trajectory, not per env")] = False
    # Tokens the whole prompt may use; observations share what is left after the rules, and
    # only the longest are cut (Search evidence is shown whole whenever it fits).
    context_budget_tokens: int = 8000
    max_prompt_steps: int = 60  # longer trajectories keep their head and tail
    input_name: str = "processed_trajectories.json"  # how rejects name the input


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
        ended_by_limit=(outcome == "Failure" and steps[-1].done and recorded is None
                        and not _is_terminal(steps[-1].action, spec)),
    )


def _is_terminal(action: str | None, spec: EnvSpec) -> bool:
    """Whether the action ends an episode by itself (a purchase, an answer): a failure that
    ends with one is a wrong final choice, not a spent step budget."""
    semantics = spec.action_semantics
    matched = match_rule(action, semantics) if action and semantics else None
    return matched is not None and matched[0].name in semantics.terminal_rules


# ---------------------------------------------------------------------------------------------
# The prompt (what an LLM teacher reads)

_SHARED_RULES = """\
You turn one agent trajectory into a reusable skill memory for future agents in the same \
environment. Answer with one JSON object and nothing else:
{{"contextual_description": str,
 "refined_trajectory": [{{"step_index": int, "action": str, "critical_observation": str, \
"reasoning": str}}] | null,
 "planning_pattern": str | null,
 "mistakes_to_avoid": [{{"trigger_condition": str, "bad_action": str}}]}}

For a SUCCESS:
- refined_trajectory: chain backwards from {goal_step}. For the step you hold, find what it \
needed (a place reached, an object in hand, an open container, a changed object state, a \
selected option, retrieved evidence), keep the nearest earlier step that produced it, drop \
everything between, and repeat from the kept step. Each kept step has its original \
step_index, the abstracted action, the critical_observation that shows its effect, and the \
reasoning. Never invent a step that is not in the trajectory.
- planning_pattern: one chain of steps joined by " -> ".
- mistakes_to_avoid: an empty list.
For a FAILURE:
- refined_trajectory and planning_pattern are null.
- mistakes_to_avoid: the errors visible in the trajectory (rejected or inadmissible actions, \
repeated cycles, a wrong final choice, missing evidence, a spent step budget), each as an \
abstract trigger_condition (the situation) and bad_action (what the agent did wrong).

This environment's rules:
Description, in the form: {description_form}
{description_rules}
Refined trajectory:
{refinement_rules}
Planning pattern:
{pattern_rules}
Mistakes:
{mistake_rules}
Placeholders you may use: {placeholders}.
Example description: {example_description}
Example planning pattern: {example_pattern}"""


def _bullets(lines: Sequence[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def system_prompt(profile: PromptProfile) -> str:
    """The memory prompt's instructions for one environment: shared rules plus its profile."""
    return _SHARED_RULES.format(
        goal_step=profile.goal_step,
        description_form=profile.description_form,
        description_rules=_bullets(profile.description_rules),
        refinement_rules=_bullets(profile.refinement_rules),
        pattern_rules=_bullets(profile.pattern_rules),
        mistake_rules=_bullets(profile.mistake_rules),
        placeholders=", ".join(profile.placeholders),
        example_description=profile.example_description,
        example_pattern=profile.example_pattern,
    )


def _profile(spec: EnvSpec) -> PromptProfile:
    if spec.prompts is None:
        raise ValueError(f"environment {spec.name!r} has no prompt profile; add one in "
                         "its module in pipeline/envs/")
    return spec.prompts


def fair_share(lengths: Sequence[int], available: int) -> int | None:
    """The largest per-item cap c with sum(min(len, c)) <= available; None when all fit.

    Short observations stay whole and only the longest ones are cut, so a Search passage
    holding the bridge entity is shown in full whenever the budget allows it."""
    if sum(lengths) <= available:
        return None
    remaining, count = available, len(lengths)
    for length in sorted(lengths):
        share = remaining // count
        if length > share:
            return max(0, share)
        remaining -= length
        count -= 1
    return max(0, remaining)


def _render_steps(ctx: MemoryContext, options: MemoryOptions, available_chars: int) -> str:
    numbered = list(zip(ctx.step_numbers, ctx.steps, strict=True))
    omitted = 0
    if len(numbered) > options.max_prompt_steps:
        head = options.max_prompt_steps // 2
        tail = options.max_prompt_steps - head
        omitted = len(numbered) - head - tail
        numbered = [*numbered[:head], *numbered[-tail:]]
    observations = [" ".join(observation.split()) for _, (_, observation) in numbered]
    frames = [f"[{number}] action: {action or '(start)'} | observation: "
              for number, (action, _) in numbered]
    cap = fair_share([len(o) for o in observations],
                     available_chars - sum(len(f) + 1 for f in frames))
    lines = []
    for frame, obs in zip(frames, observations, strict=True):
        if cap is not None and len(obs) > cap:
            obs = obs[:cap] + " ..."
        lines.append(frame + obs)
    if omitted:
        head = options.max_prompt_steps // 2
        lines.insert(head, f"... ({omitted} steps omitted) ...")
    return "\n".join(lines)


def build_memory_request(
    ctx: MemoryContext, options: MemoryOptions
) -> TeacherRequest[MemoryAnswer]:
    system = system_prompt(_profile(ctx.spec))
    header = (
        f"Environment: {ctx.spec.memory_environment_tag}\n"
        f"Task category: {ctx.category}\n"
        + (f"Data source: {ctx.data_source}\n" if ctx.data_source else "")
        + f"Goal: {ctx.goal}\nOutcome: {ctx.outcome.upper()}\n\nTrajectory:\n"
    )
    available = options.context_budget_tokens * CHARS_PER_TOKEN - len(system) - len(header)
    user = header + _render_steps(ctx, options, available)
    return MEMORY.request(
        f"{ctx.env_id}#{ctx.trajectory_index}",
        ({"role": "system", "content": system}, {"role": "user", "content": user}),
        context=lambda: ctx,  # the prompt's own data: nothing more to build
        answer_model=bounded_answer_model(
            MEMORY_ANSWER_BY_OUTCOME[ctx.outcome],
            # A short episode can still hold several mistakes (a wrong query and a wrong
            # answer in one step); the bound only stops endless repetition.
            (("mistakes_to_avoid", max(MIN_MISTAKES_BOUND, len(ctx.step_numbers))),
             ("refined_trajectory", max(1, len(ctx.step_numbers)))),
            ctx.step_numbers,
        ),
    )


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


def generate_memories(
    records: Iterable[TrajectorySet | SearchTrajectorySet],
    spec: EnvSpec,
    options: MemoryOptions | None,
    teacher: Teacher,
    positions: Iterable[int] | None = None,
) -> StageResult[Memory]:
    """`iter_memories` with the memories collected into the result (tests, shards)."""
    result, memories = iter_memories(records, spec, options, teacher, positions)
    result.records = list(memories)
    return result


def iter_memories(
    records: Iterable[TrajectorySet | SearchTrajectorySet],
    spec: EnvSpec,
    options: MemoryOptions | None,
    teacher: Teacher,
    positions: Iterable[int] | None = None,
) -> tuple[StageResult[Memory], Iterator[Memory]]:
    """Memories for the selected trajectories of stage-1 records, in input order, as a stream:
    the result (records left empty) and the memories, each yielded once its answer is in. The
    records are read once, as the teacher's window has room (teacher/base.py answer_stream), so
    only that window of trajectories is held; de-duplication keeps the memory ids seen. The
    result's rejects, counters and teacher usage are complete once the stream is exhausted.

    `positions`: where each record stands in the whole input, when `records` is one shard of
    it; the result's extras then say, for pipeline/stages/shards.py, the input position of each
    memory (`positions`) and the (phase, position) of each reject (`reject_order`: rejects
    met before the teacher come first, then the teacher's, each phase in input order)."""
    options = options or MemoryOptions()
    counts: Counter[str] = Counter()
    seen_ids: set[str] = set()
    # The two phases of rejects, each in input order, listed one after the other at the end.
    before_teacher = RejectPhase(1)
    from_teacher = RejectPhase(2)
    memory_positions: list[int] = []
    result: StageResult[Memory] = StageResult([], unit="trajectories",
                                              extras={"positions": memory_positions})
    asked: deque[tuple[MemoryContext, int]] = deque()  # contexts in the teacher's window

    def reject(phase: RejectPhase, env_id: str, index: int, reason: str, detail: str = "", *,
               position: int) -> None:
        phase.add(Reject(
            stage=STAGE, file=options.input_name, reason=reason,
            trajectory=env_id if index < 0 else f"{env_id}/{index}",
            detail=f"env {env_id}, trajectory {index}: {detail}"), position)
        counts[f"failed_{reason}"] += 1

    def requests() -> Iterator[TeacherRequest[MemoryAnswer]]:
        places = iter(positions) if positions is not None else None
        for offset, raw in enumerate(records):
            position = next(places) if places is not None else offset
            counts["records"] += 1
            record = as_trajectory_record(raw)
            chosen = range(len(record.trajectories)) if options.all_trajectories else range(
                min(1, len(record.trajectories)))
            if not record.trajectories:
                reject(before_teacher, record.env_id, -1, "no_trajectories", position=position)
            for index in chosen:
                try:
                    ctx = build_context(record, index, spec)
                except ValueError as exc:
                    reject(before_teacher, record.env_id, index, "unusable_trajectory", str(exc),
                           position=position)
                    continue
                if ctx.memory_id in seen_ids:
                    counts["skipped_duplicate_trajectory"] += 1
                    continue
                seen_ids.add(ctx.memory_id)
                asked.append((ctx, position))
                counts["requests"] += 1
                yield build_memory_request(ctx, options)

    def memories() -> Iterator[Memory]:
        with answer_stream(teacher, requests(), stage=STAGE) as answers:
            for answer_result in answers:
                ctx, position = asked.popleft()
                answer = MEMORY.answer(answer_result)
                if answer is None:
                    reject(from_teacher, ctx.env_id, ctx.trajectory_index, "teacher_error",
                           answer_result.error or "", position=position)
                    continue
                try:
                    memory = memory_from_answer(ctx, answer, teacher.name)
                except ValueError as exc:
                    reject(from_teacher, ctx.env_id, ctx.trajectory_index, "incomplete_answer",
                           str(exc), position=position)
                    continue
                memory_positions.append(position)
                counts[f"memories_{ctx.outcome.lower()}"] += 1
                yield memory
        rejects = before_teacher.rejects + from_teacher.rejects
        counts["requests"] += 0  # the counter is kept even when nothing was asked
        counts["memories"] = len(memory_positions)
        attempts = counts["requests"] + len(before_teacher.rejects)
        counts["trajectories_attempted"] = attempts
        result.rejects = rejects
        result.counts = stage_counts(counts, inputs=attempts, outputs=len(memory_positions),
                                     rejected=len(rejects))
        result.teacher = [answers.stats]
        result.extras["reject_order"] = before_teacher.order + from_teacher.order

    return result, memories()
