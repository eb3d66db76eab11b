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
- a trajectory whose requests still fail is left out, reported as a Reject and counted, and
  the failure rate is part of the result.

`solve_distill` is the offline solver: deterministic reasoning that ties each action to the goal
and the current observation, for runs without an API key.
"""

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skillsft.pipeline.conversations import LayoutError, RenderOptions, TurnDraft
from skillsft.pipeline.render import BlockOptions, render_block
from skillsft.pipeline.teacher.base import (
    BatchStats,
    Teacher,
    TeacherRequest,
    TeacherResult,
    register_offline_solver,
)
from skillsft.schemas.conversation import Conversation, ExtraInfo, Turn
from skillsft.schemas.distill_answers import DistillAnswer, StepThought, thoughts_answer_model
from skillsft.schemas.reject import Reject
from skillsft.schemas.skill_bank import SkillBank
from skillsft.schemas.trajectory import SearchTrajectorySet, TrajectorySet

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

KIND = "distill"
PROMPT_VERSION = "distill-v2"
CHARS_PER_TOKEN = 4  # a rough, deliberately conservative estimate for budgeting windows

TrajectoryRecord = TrajectorySet | SearchTrajectorySet


@dataclass(frozen=True)
class DistillOptions:
    render: RenderOptions = field(default_factory=RenderOptions)
    block: BlockOptions = field(default_factory=BlockOptions)
    # Tokens a request may use for the steps it shows (instructions and the block come on top).
    context_budget_tokens: int = 6000
    window_overlap: int = 2  # earlier steps shown as context when a trajectory is split
    # Failed episodes teach the student to fail; they are used by stage 2, not here, unless asked.
    include_failed: bool = False
    input_name: str = "processed_trajectories.json"  # how rejects name the input


@dataclass
class DistillResult:
    conversations: list[Conversation]
    failures: list[Reject]
    counts: dict[str, int]
    stats: BatchStats | None

    @property
    def failure_rate(self) -> float:
        attempted = self.counts.get("trajectories_attempted", 0)
        return self.counts.get("trajectories_failed", 0) / attempted if attempted else 0.0


@dataclass(frozen=True)
class Window:
    """Steps [start, stop) get thoughts; steps [context_start, start) are shown as context."""

    start: int
    stop: int
    context_start: int


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


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


def plan_requests(
    trajectory_id: str,
    goal: str,
    block: str,
    drafts: list[TurnDraft],
    options: DistillOptions,
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
        context = {
            "goal": goal,
            "steps": [
                {
                    "index": i,
                    "observation": drafts[i].observation,
                    "action": drafts[i].action,
                    "synthetic": drafts[i].synthetic,
                }
                for i in indices
            ],
        }
        requests.append(
            TeacherRequest(
                request_id=f"{trajectory_id}#w{number}" if len(windows) > 1 else trajectory_id,
                kind=KIND,
                messages=(
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": text},
                ),
                answer_model=thoughts_answer_model(tuple(indices)),
                prompt_version=PROMPT_VERSION,
                offline_context=context,
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


def distill(
    records: Sequence[TrajectoryRecord],
    spec: "EnvSpec",
    bank: SkillBank,
    teacher: Teacher,
    options: DistillOptions | None = None,
) -> DistillResult:
    """Turn processed trajectories into conversations, one per kept trajectory, in input order."""
    options = options or DistillOptions()
    layout = spec.turn_layout()
    counts: Counter[str] = Counter()
    failures: list[Reject] = []
    blocks: dict[str, str] = {}
    planned: list[Planned] = []
    requests: list[TeacherRequest[DistillAnswer]] = []

    def reject(reason: str, detail: str) -> None:
        failures.append(Reject(stage=KIND, file=options.input_name, reason=reason, detail=detail))

    for record in records:
        category = spec.classify_task(record.task, getattr(record, "data_source", None))
        if category not in blocks:
            blocks[category] = render_block(bank, spec, category, options.block)
            if not bank.category_skills().get(category):
                counts["categories_without_skills"] += 1
        for number, steps in enumerate(record.trajectories):
            trajectory_id = f"{record.env_id}/{number}"
            counts["trajectories_in"] += 1
            if not options.include_failed and not layout.succeeded(record, steps):
                counts["skipped_failed_trajectory"] += 1
                continue
            counts["trajectories_attempted"] += 1
            try:
                drafts = layout.build_turns(
                    record.task, blocks[category], steps, trajectory_id, options.render, counts
                )
            except LayoutError as exc:
                counts["trajectories_failed"] += 1
                counts["failed_layout"] += 1
                reject("layout", f"{trajectory_id}: {exc}")
                continue
            if not drafts:
                counts["trajectories_failed"] += 1
                counts["failed_no_turns"] += 1
                reject("no_turns", f"{trajectory_id}: the trajectory has no action to learn from")
                continue
            batch = plan_requests(
                trajectory_id, record.task, blocks[category], drafts, options
            )
            counts["requests"] += len(batch)
            counts["windowed_trajectories"] += len(batch) > 1
            requests.extend(batch)
            planned.append(
                Planned(
                    record,
                    trajectory_id,
                    category,
                    blocks[category],
                    drafts,
                    tuple(r.request_id for r in batch),
                )
            )

    results, stats = teacher.run_batch(requests, stage=KIND) if requests else ([], None)
    by_id: dict[str, TeacherResult[Any]] = {r.request_id: r for r in results}
    source = source_of(teacher, stats)
    conversations = []
    for item in planned:
        thoughts, error = collect_thoughts(item, by_id)
        if thoughts is None:
            counts["trajectories_failed"] += 1
            counts["failed_teacher"] += 1
            reject("teacher", f"{item.trajectory_id}: {error}")
            continue
        conversations.append(build_conversation(spec, item, thoughts, source))
        counts["conversations"] += 1
        counts["turns"] += len(item.drafts)
    return DistillResult(conversations, failures, dict(counts), stats)


def collect_thoughts(
    item: Planned, by_id: dict[str, TeacherResult[Any]]
) -> tuple[list[str] | None, str]:
    """The trajectory's thoughts in step order, or None and why when any window failed."""
    merged: dict[int, str] = {}
    for request_id in item.request_ids:
        result = by_id.get(request_id)
        if result is None or result.answer is None:
            why = result.error if result else "no result returned"
            return None, f"request {request_id} failed: {why}"
        merged.update(result.answer.by_index())
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
        ),
    )


# -- offline solver ---------------------------------------------------------------------------

# (action pattern, why the agent takes it). The first match wins; named groups fill the text.
ACTION_REASONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE | re.DOTALL), reason)
    for pattern, reason in (
        (
            r"done",
            "Everything the goal asks for is in place, so the task is complete and I "
            "declare it done.",
        ),
        (
            r"go to (?P<place>.+)",
            "I have not found what I need here yet, so I go to {place} to check it next.",
        ),
        (
            r"take (?P<obj>.+?) from (?P<place>.+)",
            "{obj} is an object the goal needs, so I pick it up from {place}.",
        ),
        (
            r"(?:put|move) (?P<obj>.+?) (?:in/on|in|on|to) (?P<place>.+)",
            "I am holding {obj} and {place} is where the goal wants it, so I put it there.",
        ),
        (r"open (?P<obj>.+)", "{obj} is closed and may hold what I am looking for, so I open it."),
        (r"close (?P<obj>.+)", "I am done with {obj}, so I close it and move on."),
        (
            r"(?P<verb>clean|heat|cool) (?P<obj>.+?) with (?P<tool>.+)",
            "The goal needs the object {verb}ed before it is placed, "
            "so I {verb} {obj} with {tool}.",
        ),
        (
            r"use (?P<obj>.+)",
            "I switch on {obj} so I can look at the object in its light, as the goal requires.",
        ),
        (r"examine (?P<obj>.+)", "I examine {obj} to see its state before deciding what to do."),
        (r"look", "I look around to get my bearings before choosing where to go."),
        (r"inventory", "I check what I am carrying before the next move."),
        (
            r"search\[(?P<query>.+)\]",
            'I search for "{query}", which states the request\'s key '
            "attributes, to get matching products.",
        ),
        (
            r"click\[buy now\]",
            "This item with the options I chose meets every requirement of the "
            "request, so I buy it.",
        ),
        (
            r"click\[< prev\]",
            "I have seen what I needed on this page, so I go back to the previous one.",
        ),
        (
            r"click\[next >\]",
            "None of these results fits the request well, so I look at the next page of results.",
        ),
        (
            r"click\[back to search\]",
            "This product does not fit the request, so I go back to search again.",
        ),
        (
            r"click\[(?P<page>description|features|reviews)\]",
            "I open the {page} to check the product against the request's requirements.",
        ),
        (
            r"click\[(?P<item>b0[0-9a-z]{8})\]",
            "Product {item} looks like the best match among the results, so I open it.",
        ),
        (r"click\[(?P<option>.+)\]", "The request asks for {option}, so I select that option."),
        (
            r"<search>(?P<query>.*)</search>",
            'I do not have this information yet, so I search for "{query}" to find evidence.',
        ),
        (
            r"<answer>(?P<answer>.*)</answer>",
            "The information I have gathered supports the answer {answer}, so I commit to it.",
        ),
    )
)
FALLBACK_REASON = "Of the actions available, {action} moves me closest to the goal, so I take it."
OBSERVATION_CHARS = 180


def summarize_observation(observation: str) -> str:
    """The start of an observation on one line, cut at a word boundary, for a thought to cite."""
    text = " ".join(observation.replace("[SEP]", ";").split())
    if len(text) <= OBSERVATION_CHARS:
        return text.rstrip(".")
    return text[:OBSERVATION_CHARS].rsplit(" ", 1)[0].rstrip(".,;") + "…"


# Where ALFWorld transforms happen, keyed by the goal word that asks for them.
TOOL_FOR_GOAL_WORD = {
    "hot": "microwave",
    "heat": "microwave",
    "cool": "fridge",
    "cold": "fridge",
    "clean": "sinkbasin",
    "desklamp": "desklamp",
}


def reason_for(goal: str, action: str) -> str:
    """Why the action serves the goal, from the first matching pattern (or a generic reason)."""
    go_to = re.fullmatch(r"go to (?P<place>.+?)(?: \d+)?", action.strip(), re.IGNORECASE)
    if go_to:
        place, words = go_to.group("place"), set(re.findall(r"[a-z]+", goal.lower()))
        if place in words:
            return f"The goal names the {place}, so I go to {action[6:]} to deal with it."
        if any(TOOL_FOR_GOAL_WORD.get(word) == place for word in words):
            return f"The goal needs what the {place} does, so I go to {action[6:]}."
    for pattern, reason in ACTION_REASONS:
        match = pattern.fullmatch(action.strip())
        if match:
            text = reason.format(**match.groupdict())
            return text[:1].upper() + text[1:]
    return FALLBACK_REASON.format(action=action)


def offline_thought(goal: str, observation: str, action: str, first: bool) -> str:
    seen = summarize_observation(observation)
    opening = (
        f"I see: {seen}" + ("" if seen.endswith("…") else ".")
        if seen
        else ("I have nothing new to go on yet.")
    )
    if first:
        opening += f" My goal: {goal}."
    return f"{opening} {reason_for(goal, action)}"


@register_offline_solver(KIND)
def solve_distill(context: dict[str, Any]) -> DistillAnswer:
    """Deterministic thoughts from the request's own data; the same context, the same answer."""
    goal = context["goal"].strip().rstrip(".")
    steps = context["steps"]
    return DistillAnswer(
        thoughts=[
            StepThought(
                step_index=step["index"],
                thought=offline_thought(goal, step["observation"], step["action"],
                                        step["index"] == 0),
            )
            for step in steps
        ]
    )
