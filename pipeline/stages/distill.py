"""Stage 3: reasoning distillation, from processed trajectories to ShareGPT conversations.

For every kept trajectory the teacher is asked, in one request, for one short thought per
step; each gpt turn is then the thought plus the action copied verbatim from the rollout, so
every action in the corpus is one the environment accepted. Three rules keep the corpus honest:

- exactly one thought per step with matching indices: the request's answer model enforces it
  (`schemas.distill_answers.thoughts_answer_model`), so a wrong answer is a validation failure
  the teacher layer re-asks, quoting the error; nothing is ever padded with empty thoughts;
- a trajectory too long for the teacher's context budget is split into windows, each showing a
  few earlier steps as context (the overlap) and asking thoughts only for its own steps, so
  every step gets exactly one thought;
- a trajectory whose requests still fail is left out, reported as a Reject and counted; the
  unit is the trajectory (`inputs` those tried, `rejected` those that failed), and whether too
  many failed is decided once for every stage (stages/outcome.py).

The offline teacher answers from the request's context (pipeline/teacher/offline/thoughts.py):
the goal, the whole trajectory so far, the environment's action tables and the shown skills.
"""

from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from skillsft.pipeline.formats.conversations import LayoutError, RenderOptions, TurnDraft
from skillsft.pipeline.formats.render import BlockOptions, render_block, shown_item_ids
from skillsft.pipeline.formats.token_lengths import estimate_tokens
from skillsft.pipeline.stages.result import RejectPhase, StageResult, stage_counts
from skillsft.pipeline.stages.skill_selection import (
    LexicalScorer,
    Scorer,
    SkillSelection,
    retrieved_block,
    skill_text,
    task_specific,
)
from skillsft.pipeline.teacher.base import (
    BatchStats,
    Teacher,
    TeacherRequest,
    TeacherResult,
    answer_stream,
)
from skillsft.pipeline.teacher.contexts import DistillContext
from skillsft.pipeline.teacher.kinds import DISTILL
from skillsft.schemas.conversation import Conversation, ExtraInfo, Turn
from skillsft.schemas.distill_answers import DistillAnswer, thoughts_answer_model
from skillsft.schemas.reject import Reject
from skillsft.schemas.skill_bank import Skill, SkillBank
from skillsft.schemas.trajectory import SearchTrajectorySet, TrajectorySet

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

KIND = DISTILL.name
# The version lives in the kind table (teacher/kinds.py): bump it there when the prompt text
# below changes, since the version is part of every journal key.
PROMPT_VERSION = DISTILL.prompt_version

TrajectoryRecord = TrajectorySet | SearchTrajectorySet


@dataclass(frozen=True)
class DistillOptions:
    render: RenderOptions = field(default_factory=RenderOptions)
    block: BlockOptions = field(default_factory=BlockOptions)
    skills: SkillSelection = field(default_factory=SkillSelection)  # which skills a block shows
    # Tokens a request may use for the steps it shows (instructions and the block come on top).
    context_budget_tokens: int = 6000
    window_overlap: int = 2  # earlier steps shown as context when a trajectory is split
    # Failed episodes teach the student to fail; they are used by stage 2, not here, unless asked.
    include_failed: bool = False
    input_name: str = "processed_trajectories.json"  # how rejects name the input


@dataclass(frozen=True)
class Window:
    """Steps [start, stop) get thoughts; steps [context_start, start) are shown as context."""

    start: int
    stop: int
    context_start: int


def split_windows(costs: Sequence[int], budget: int, overlap: int) -> list[Window]:
    """Cover every step exactly once with windows whose cost (context included) fits the budget.

    A single step costlier than the budget still gets a window of its own: the teacher may
    manage, and if it cannot, the trajectory fails visibly rather than losing that step.
    Context steps are dropped, oldest first, when they would push a window over the budget.
    """
    windows: list[Window] = []
    start = 0
    while start < len(costs):
        context_start = max(0, start - overlap)
        while context_start < start and sum(costs[context_start : start + 1]) > budget:
            context_start += 1
        used = sum(costs[context_start:start])
        stop = start
        while stop < len(costs) and (stop == start or used + costs[stop] <= budget):
            used += costs[stop]
            stop += 1
        windows.append(Window(start, stop, context_start))
        start = stop
    return windows


# -- the request ------------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You reconstruct the reasoning of an expert agent. You are shown the agent's goal, the "
    "experience it was given, and the steps it took: at each step what it observed, which "
    "actions were available, and the action it chose. For each step you are asked about, "
    "write the thought the agent has before acting: one to three sentences of strategic "
    "reasoning, first person, present tense, that lead from the goal and what the current "
    "observation actually shows to exactly that action. Never claim anything the observation "
    "contradicts. When a retrieved skill or a listed mistake bears on the step, apply it and "
    "name it by its title. Do not mention that the action was given to you, do not propose "
    "another action, do not rewrite the action, and do not use tags."
)


def describe_step(index: int, draft: TurnDraft) -> str:
    lines = [f"Step {index}", f"Observation: {draft.observation or '(nothing yet)'}"]
    if draft.admissible:
        lines.append(f"Available actions: {', '.join(draft.admissible)}")
    if draft.synthetic:
        lines.append("Note: the goal has just been reached; this step declares it done.")
    lines.append(f"Action: {draft.action}")
    return "\n".join(lines)


def request_text(
    goal: str, block: str, context: list[str], asked: list[str], indices: list[int]
) -> str:
    parts = [f"Goal: {goal}", block]
    if context:
        parts.append("Earlier steps (context only, no thought needed):\n\n" + "\n\n".join(context))
    parts.append("Steps to write a thought for:\n\n" + "\n\n".join(asked))
    parts.append(
        'Answer with JSON {"thoughts": [{"step_index": <int>, "thought": "<text>"}]} holding '
        f"exactly one thought for each step_index in {indices}, in that order."
    )
    return "\n\n".join(parts)


@dataclass(frozen=True)
class Planned:
    """One trajectory on its way through the teacher: its turns and its windows' request ids."""

    record: TrajectoryRecord
    trajectory_id: str
    category: str
    block: str
    drafts: list[TurnDraft]
    request_ids: tuple[str, ...]
    position: int = 0  # of the record in the whole input
    skill_ids: tuple[str, ...] = ()  # what the block shows, for the record's provenance


def offline_context(
    goal: str,
    drafts: Sequence[TurnDraft],
    indices: Sequence[int],
    semantics: Any = None,
    skill_titles: Sequence[str] = (),
) -> DistillContext:
    """What the offline teacher reads to write the thoughts of `indices` (never part of the
    journal key): the goal, the state so far, and the asked steps. Requests carry the recipe
    (`partial(offline_context, ...)`), so it is built only when the offline teacher answers."""
    stop = max(indices) + 1
    return DistillContext(
        goal=goal,
        history=tuple({"observation": d.observation, "action": d.action} for d in drafts[:stop]),
        complete=stop == len(drafts),
        semantics=semantics,
        skill_titles=tuple(skill_titles),
        steps=tuple(
            {
                "index": i,
                "observation": drafts[i].observation,
                "action": drafts[i].action,
                "synthetic": drafts[i].synthetic,
            }
            for i in indices
        ),
    )


def plan_requests(
    trajectory_id: str,
    goal: str,
    block: str,
    drafts: list[TurnDraft],
    options: DistillOptions,
    semantics: Any = None,
    skill_titles: Sequence[str] = (),
) -> list[TeacherRequest[DistillAnswer]]:
    steps = [describe_step(i, d) for i, d in enumerate(drafts)]
    overhead = estimate_tokens(SYSTEM_PROMPT + request_text(goal, block, [], [], []))
    budget = max(1, options.context_budget_tokens - overhead)
    windows = split_windows([estimate_tokens(s) for s in steps], budget, options.window_overlap)
    requests = []
    for number, window in enumerate(windows):
        indices = list(range(window.start, window.stop))
        text = request_text(
            goal,
            block,
            steps[window.context_start : window.start],
            steps[window.start : window.stop],
            indices,
        )
        requests.append(
            DISTILL.request(
                f"{trajectory_id}#w{number}" if len(windows) > 1 else trajectory_id,
                (
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": text},
                ),
                context=partial(offline_context, goal, drafts, indices, semantics, skill_titles),
                answer_model=thoughts_answer_model(tuple(indices)),
            )
        )
    return requests


# -- the stage --------------------------------------------------------------------------------


def source_of(teacher: Teacher, stats: BatchStats | None) -> str:
    """What extra_info.source records: `offline`, or the teacher and model that wrote thoughts."""
    model = stats.model if stats else ""
    if teacher.name == "offline" or not model:
        return teacher.name
    return f"{teacher.name}:{model}"


def skill_block(
    bank: SkillBank,
    spec: "EnvSpec",
    category: str,
    task: str,
    selection: SkillSelection,
    scorer: Scorer,
    block_options: BlockOptions,
) -> tuple[str, list[Skill]]:
    """The retrieved-experience block stage 3 puts into a record's prompt, and the
    task-specific skills it shows: the category's, or those retrieved for the task."""
    if selection.mode == "retrieve":
        return retrieved_block(bank, spec, category, task, selection, scorer, block_options)
    return (render_block(bank, spec, category, block_options),
            list(bank.category_skills().get(category, [])))


def block_item_ids(bank: SkillBank, spec: "EnvSpec", category: str, chosen: Sequence[Skill],
                   selection: SkillSelection, block_options: BlockOptions) -> tuple[str, ...]:
    """The ids of every item the block shows, in block order, asked of the renderer with the
    same bank view the block was rendered from (retrieve mode: the retrieved skills)."""
    view = bank
    if selection.mode == "retrieve":
        view = bank.model_copy(update={spec.bank_category_key: {category: list(chosen)}})
    return tuple(shown_item_ids(view, category, block_options))


def distill(
    records: Iterable[TrajectoryRecord],
    spec: "EnvSpec",
    options: DistillOptions | None,
    teacher: Teacher,
    bank: SkillBank,
    scorer: Scorer | None = None,
    positions: Iterable[int] | None = None,
) -> StageResult[Conversation]:
    """`iter_distilled` with the conversations collected into the result (tests, shards)."""
    records = list(records)
    result, conversations = iter_distilled(records, spec, options, teacher, bank, scorer,
                                           positions, tasks=[r.task for r in records])
    result.records = list(conversations)
    return result


def iter_distilled(
    records: Iterable[TrajectoryRecord],
    spec: "EnvSpec",
    options: DistillOptions | None,
    teacher: Teacher,
    bank: SkillBank,
    scorer: Scorer | None = None,
    positions: Iterable[int] | None = None,
    tasks: Iterable[str] | None = None,
) -> tuple[StageResult[Conversation], Iterator[Conversation]]:
    """Turn processed trajectories into conversations, one per kept trajectory, in input order,
    as a stream: the result (records left empty) and the conversations, each yielded once its
    windows are answered. The records are read once, as the teacher's window has room
    (teacher/base.py answer_stream), so only the trajectories in that window are held. The
    result's rejects, counters and teacher usage are complete once the stream is exhausted.

    `scorer` ranks skills for `--skills retrieve` (default: the lexical scorer), which first
    needs every task of the input: `tasks`, a light first pass over the same records (required
    in that mode). `positions`: where each record stands in the whole input, when `records` is
    one shard of it; the result's extras then say, for pipeline/stages/shards.py, the input
    position of each conversation (`positions`), the (phase, position) of each reject
    (`reject_order`) and the counters counted once per skill block (`block_counts`)."""
    options = options or DistillOptions()
    layout = spec.turn_layout()
    counts: Counter[str] = Counter()
    blocks: dict[str, str] = {}
    shown: dict[str, list[str]] = {}  # block key -> titles of the task-specific skills shown
    shown_ids: dict[str, tuple[str, ...]] = {}  # block key -> ids of every item shown
    retrieving = options.skills.mode == "retrieve"
    scorer = scorer or LexicalScorer()
    if retrieving:
        if tasks is None:
            raise ValueError("--skills retrieve needs every task first: pass `tasks`")
        scorer.prepare([*tasks, *(skill_text(s) for s in task_specific(bank))])
    # The two phases of rejects, each in input order, listed one after the other at the end.
    before_teacher, from_teacher = RejectPhase(1), RejectPhase(2)
    block_counts: dict[str, dict[str, int]] = {}
    conversation_positions: list[int] = []
    result: StageResult[Conversation] = StageResult(
        [], unit="trajectories",
        extras={"positions": conversation_positions, "block_counts": block_counts})
    asked: deque[Planned] = deque()  # trajectories whose windows are in the teacher's window

    def reject(phase: RejectPhase, reason: str, trajectory_id: str, detail: str,
               position: int) -> None:
        phase.add(Reject(stage=KIND, file=options.input_name, reason=reason,
                         trajectory=trajectory_id, detail=f"{trajectory_id}: {detail}"),
                  position)

    def requests() -> Iterator[TeacherRequest[DistillAnswer]]:
        places = iter(positions) if positions is not None else None
        for offset, record in enumerate(records):
            position = next(places) if places is not None else offset
            category = spec.classify_task(record.task, getattr(record, "data_source", None))
            key = f"{category}\n{record.task}" if retrieving else category
            if key not in blocks:
                blocks[key], chosen = skill_block(bank, spec, category, record.task,
                                                  options.skills, scorer, options.block)
                shown[key] = [s.title for s in chosen]
                shown_ids[key] = block_item_ids(bank, spec, category, chosen, options.skills,
                                                options.block)
                if retrieving:
                    once = {"records_without_retrieved_skills": int(not chosen),
                            "retrieved_skills": len(chosen)}
                else:
                    once = {"categories_without_skills": 1} if not chosen else {}
                block_counts[key] = once
                counts.update(once)
            for number, steps in enumerate(record.trajectories):
                trajectory_id = f"{record.env_id}/{number}"
                counts["trajectories_in"] += 1
                if not options.include_failed and not layout.succeeded(record, steps):
                    counts["skipped_failed_trajectory"] += 1
                    continue
                counts["trajectories_attempted"] += 1
                try:
                    drafts = layout.build_turns(
                        record.task, blocks[key], steps, trajectory_id, options.render, counts
                    )
                except LayoutError as exc:
                    counts["trajectories_failed"] += 1
                    counts["failed_layout"] += 1
                    reject(before_teacher, "layout", trajectory_id, str(exc), position)
                    continue
                if not drafts:
                    counts["trajectories_failed"] += 1
                    counts["failed_no_turns"] += 1
                    reject(before_teacher, "no_turns", trajectory_id,
                           "the trajectory has no action to learn from", position)
                    continue
                batch = plan_requests(
                    trajectory_id, record.task, blocks[key], drafts, options,
                    spec.action_semantics, shown[key],
                )
                counts["requests"] += len(batch)
                counts["windowed_trajectories"] += len(batch) > 1
                asked.append(Planned(record, trajectory_id, category, blocks[key], drafts,
                                     tuple(r.request_id for r in batch), position,
                                     shown_ids[key]))
                yield from batch

    def conversations() -> Iterator[Conversation]:
        source = ""
        by_id: dict[str, TeacherResult[Any]] = {}  # the answered windows of `asked[0]`
        with answer_stream(teacher, requests(), stage=KIND) as answers:
            for answer in answers:
                by_id[answer.request_id] = answer
                item = asked[0]
                if len(by_id) < len(item.request_ids):
                    continue
                asked.popleft()
                thoughts, error = collect_thoughts(item, by_id)
                by_id = {}
                if thoughts is None:
                    counts["trajectories_failed"] += 1
                    counts["failed_teacher"] += 1
                    reject(from_teacher, "teacher", item.trajectory_id, str(error),
                           item.position)
                    continue
                source = source or source_of(teacher, answers.stats)
                conversation_positions.append(item.position)
                counts["conversations"] += 1
                counts["turns"] += len(item.drafts)
                yield build_conversation(spec, item, thoughts, source)
        result.rejects = before_teacher.rejects + from_teacher.rejects
        result.counts = stage_counts(counts, inputs=counts["trajectories_attempted"],
                                     outputs=len(conversation_positions),
                                     rejected=counts["trajectories_failed"])
        result.teacher = [answers.stats] if counts["requests"] else []
        result.extras["reject_order"] = before_teacher.order + from_teacher.order

    return result, conversations()


def collect_thoughts(
    item: Planned, by_id: dict[str, TeacherResult[Any]]
) -> tuple[list[str] | None, str]:
    """The trajectory's thoughts in step order, or None and why when any window failed."""
    merged: dict[int, str] = {}
    for request_id in item.request_ids:
        result = by_id.get(request_id)
        answer = DISTILL.answer(result) if result is not None else None
        if result is None or answer is None:
            why = result.error if result else "no result returned"
            return None, f"request {request_id} failed: {why}"
        merged.update(answer.by_index())
    if sorted(merged) != list(range(len(item.drafts))):
        return None, f"thoughts cover steps {sorted(merged)}, expected 0..{len(item.drafts) - 1}"
    return [merged[i] for i in range(len(item.drafts))], ""


def build_conversation(
    spec: "EnvSpec", item: Planned, thoughts: list[str], source: str
) -> Conversation:
    layout = spec.turn_layout()
    turns = []
    for draft, thought in zip(item.drafts, thoughts, strict=True):
        turns.append(Turn(from_="human", value=draft.human))
        turns.append(
            Turn(from_="gpt", value=layout.output.format(thought=thought, action=draft.action))
        )
    return Conversation(
        system=layout.system(item.record.task, item.block),
        conversations=turns,
        extra_info=ExtraInfo(
            task=item.record.task,
            task_type=item.category,
            num_steps=len(item.drafts),
            source=source,
            env_id=item.record.env_id,
            trajectory_id=item.trajectory_id,
            skill_ids=list(item.skill_ids),
        ),
    )
