"""Step-level preference pairs from the episodes the SFT corpus throws away (issue 14).

In an env with both outcomes, take every (won, lost) pair of attempts and walk the winner's
decision points in order: the first anchor state both stood on where they acted differently is
their earliest divergence. It becomes one pair, unless an earlier pair already gave the same
(anchor, chosen action, rejected action):

- `prompt`: the alpaca instruction stage 4 writes for the winner's turn at that state, made
  by stage 3's and stage 4's own code (`TextLayout.build_turns`, `distill.build_conversation`,
  `Layout.alpaca_records`, post-checks included) on the winner's steps up to that turn; the
  instruction of a turn depends only on the turns before it, so it is byte for byte the one a
  full distillation of that episode would flatten to;
- `chosen`: that record's output, the winner's thought and action;
- `rejected`: the loser's thought and action at its own visit of the state, in the same output
  template; both thoughts are written by the distillation request (same system prompt, step
  description, answer model and offline solver), asked only for the turns pairs need;
- `metadata`: env, anchor, both trajectories, their steps and how far each was from its end.

Teacher answers are journaled by the teacher layer, so a re-run pays for nothing twice.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillsft.pipeline.envs import ENVS
from skillsft.pipeline.envs.dump_kind import check_environment
from skillsft.pipeline.formats.conversations import LayoutError, RenderOptions, TurnDraft
from skillsft.pipeline.formats.render import BlockOptions
from skillsft.pipeline.formats.rollouts.episodes import (
    EpisodeGroup,
    EpisodeRecord,
    EpisodesResult,
    collect_episodes,
    outcomes,
)
from skillsft.pipeline.stages import distill
from skillsft.pipeline.stages.anchors import INITIAL, Anchors, DecisionPoint, find_anchors
from skillsft.pipeline.stages.parse import check_rollout_dir
from skillsft.pipeline.stages.result import StageResult, stage_counts
from skillsft.pipeline.stages.skill_selection import LexicalScorer, Scorer, SkillSelection
from skillsft.pipeline.teacher.base import BatchStats, Teacher, TeacherRequest
from skillsft.pipeline.teacher.kinds import DISTILL
from skillsft.schemas import Reject, TrajectorySet
from skillsft.schemas.base import StrictModel
from skillsft.schemas.distill_answers import DistillAnswer, thoughts_answer_model
from skillsft.schemas.skill_bank import SkillBank

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

STAGE = "preferences"
# Which turns are asked about and how they are described; the request itself is stage 3's.
PROMPT_VERSION = "preferences-v1"


def read_episodes(spec: "EnvSpec", rollout_dir: str | Path) -> EpisodesResult:
    """Every episode of the rollout folder, grouped (`collect_episodes`), after the folder
    checks stage 1 makes: it exists, and it is `spec`'s environment's dump.

    Raises `RolloutDirError` when the folder is missing or holds no episode at all, and
    `WrongEnvironment` when it holds another environment's dump.
    """
    rollout_dir = Path(rollout_dir)
    check_rollout_dir(rollout_dir)
    check_environment(rollout_dir, spec, list(ENVS.values()))
    return collect_episodes(spec, rollout_dir)


class PairMetadata(StrictModel):
    env: str
    anchor_id: str
    group_id: str
    task: str
    category: str
    chosen_trajectory: str
    rejected_trajectory: str
    chosen_step: str  # step id of the state in the winner's episode ("Step 03")
    rejected_step: str
    chosen_action: str
    rejected_action: str
    # Actions the episode still took from this state on, this one included.
    chosen_actions_to_end: int
    rejected_actions_to_end: int
    source: str  # the teacher (and model) that wrote the thoughts


class PreferencePair(StrictModel):
    """One row of `<env>_preference_pairs.jsonl`, in the columns TRL's DPO trainer reads."""

    prompt: str
    chosen: str
    rejected: str
    metadata: PairMetadata


@dataclass(frozen=True)
class PreferenceOptions:
    render: RenderOptions = field(default_factory=RenderOptions)
    block: BlockOptions = field(default_factory=BlockOptions)
    # The same skill choice as stage 3's (--skills and its parameters), so a pair's prompt is
    # the instruction stage 4 writes for that state.
    skills: SkillSelection = field(default_factory=SkillSelection)
    scorer: Scorer = field(default_factory=LexicalScorer)
    context_steps: int = 2  # earlier turns shown to the teacher as context
    input_name: str = "rollouts"  # how rejects name the input


@dataclass(frozen=True)
class Side:
    """One episode's turn at the divergence: the drafts up to and including it."""

    episode: EpisodeRecord
    point: DecisionPoint
    drafts: tuple[TurnDraft, ...]

    @property
    def request_id(self) -> str:
        return f"{self.episode.trajectory_id}@turn{len(self.drafts) - 1}"

    @property
    def actions_to_end(self) -> int:
        return len(self.episode.steps) - self.point.prefix + 1


@dataclass(frozen=True)
class Candidate:
    group: EpisodeGroup
    category: str
    block: str
    anchor_id: str
    chosen: Side
    rejected: Side


def earliest_divergence(
    anchors: Anchors, won: EpisodeRecord, lost: EpisodeRecord
) -> tuple[DecisionPoint, DecisionPoint] | None:
    """The winner's first anchor state where the loser (at its first visit) acted otherwise."""
    lost_visits = anchors.first_visits(lost.trajectory_id)
    for point in anchors.points[won.trajectory_id]:
        other = lost_visits.get(point.key) if point.key in anchors.ids else None
        if other is not None and other.action != point.action:
            return point, other
    return None


def side_of(spec: "EnvSpec", group: EpisodeGroup, block: str, episode: EpisodeRecord,
            point: DecisionPoint, render: RenderOptions) -> Side:
    """The episode's turns up to the one answering `point` (post-check repairs applied)."""
    drafts = spec.turn_layout().build_turns(
        group.task, block, episode.steps[: point.prefix], episode.trajectory_id, render, Counter()
    )
    for index in range(len(drafts) - 1, -1, -1):
        if not drafts[index].synthetic and drafts[index].action == point.action:
            return Side(episode, point, tuple(drafts[: index + 1]))
    raise LayoutError(f"{episode.trajectory_id}: no turn answers {point.action!r}")


def find_candidates(
    spec: "EnvSpec", groups: Sequence[EpisodeGroup], bank: SkillBank,
    options: PreferenceOptions, counts: Counter[str], rejects: list[Reject],
) -> list[Candidate]:
    layout = spec.turn_layout()
    blocks: dict[str, str] = {}
    candidates: list[Candidate] = []
    for group in groups:
        anchors = find_anchors(layout, group)
        counts["anchors"] += len(anchors.ids)
        counts["anchors_shared"] += sum(1 for key in anchors.ids if key != INITIAL)
        wins, losses = outcomes(group.episodes)
        if not (wins and losses):
            counts["groups_single_outcome"] += 1
            continue
        counts["groups_both_outcomes"] += 1
        category = spec.classify_task(group.task, group.data_source)
        block_key = f"{category}\n{group.task}"
        if block_key not in blocks:  # the same block stage 3 puts in the system prompt
            blocks[block_key], _ = distill.skill_block(
                bank, spec, category, group.task, options.skills, options.scorer, options.block)
        seen: set[tuple[str, str, str]] = set()
        for won in wins:
            for lost in losses:
                counts["episode_pairs"] += 1
                divergence = earliest_divergence(anchors, won, lost)
                if divergence is None:
                    counts["skipped_no_divergence"] += 1
                    continue
                point, other = divergence
                anchor_id = anchors.ids[point.key]
                key = (anchor_id, point.action, other.action)
                if key in seen:
                    counts["skipped_duplicate"] += 1
                    continue
                seen.add(key)
                try:
                    chosen = side_of(spec, group, blocks[block_key], won, point, options.render)
                    rejected = side_of(spec, group, blocks[block_key], lost, other, options.render)
                except LayoutError as exc:
                    counts["skipped_layout"] += 1
                    rejects.append(Reject(stage=STAGE, file=options.input_name,
                                          reason="layout", detail=f"{anchor_id}: {exc}"))
                    continue
                candidates.append(
                    Candidate(group, category, blocks[block_key], anchor_id, chosen, rejected)
                )
    return candidates


# -- thoughts -----------------------------------------------------------------------------------


def thought_request(task: str, block: str, side: Side, context_steps: int, semantics: Any = None
                    ) -> TeacherRequest[DistillAnswer]:
    """Stage 3's request, asking for the one turn a pair needs, earlier turns as context."""
    turn = len(side.drafts) - 1
    described = [distill.describe_step(i, d) for i, d in enumerate(side.drafts)]
    context = described[max(0, turn - context_steps) : turn]
    text = distill.request_text(task, block, context, [described[turn]], [turn])
    return DISTILL.request(
        side.request_id,
        (
            {"role": "system", "content": distill.SYSTEM_PROMPT},
            {"role": "user", "content": text},
        ),
        context=partial(distill.offline_context, task, side.drafts, [turn], semantics),
        answer_model=thoughts_answer_model((turn,)),
    )


def ask_thoughts(
    candidates: Sequence[Candidate], teacher: Teacher, options: PreferenceOptions,
    counts: Counter[str], semantics: Any = None,
) -> tuple[dict[str, str], dict[str, str], BatchStats | None]:
    """(thought by request id, error by request id, usage); each turn is asked about once."""
    requests: dict[str, TeacherRequest[DistillAnswer]] = {}
    for c in candidates:
        for side in (c.chosen, c.rejected):
            if side.request_id not in requests:
                requests[side.request_id] = thought_request(
                    c.group.task, c.block, side, options.context_steps, semantics)
    counts["requests"] += len(requests)
    if not requests:
        return {}, {}, None
    results, stats = teacher.run_batch(list(requests.values()), stage=STAGE)
    thoughts: dict[str, str] = {}
    errors: dict[str, str] = {}
    for result in results:
        answer = DISTILL.answer(result)
        if answer is None:
            errors[result.request_id] = result.error or "no answer"
        else:
            thoughts[result.request_id] = next(iter(answer.by_index().values()))
    return thoughts, errors, stats


# -- the pair ---------------------------------------------------------------------------------


def stage4_record(spec: "EnvSpec", candidate: Candidate, thought: str,
                  render: RenderOptions) -> Any:
    """The alpaca record stage 4 writes for the winner's turn, or None when a post-check drops it.

    Earlier turns get empty thoughts: a record's instruction shows only earlier observations and
    actions, never earlier thoughts, so they cannot change it.
    """
    side = candidate.chosen
    turns = len(side.drafts)
    planned = distill.Planned(
        record=TrajectorySet(env_id=candidate.group.group_id, task=candidate.group.task,
                             type="mixed", trajectories=[]),
        trajectory_id=side.episode.trajectory_id, category=candidate.category,
        block=candidate.block, drafts=list(side.drafts), request_ids=(),
    )
    conversation = distill.build_conversation(spec, planned, [""] * (turns - 1) + [thought], "")
    layout = spec.turn_layout()
    records = layout.alpaca_records(conversation, spec.postchecks, render, Counter())
    before = conversation.model_copy(update={"conversations": conversation.conversations[:-2]})
    earlier = layout.alpaca_records(before, spec.postchecks, render, Counter()) if turns > 1 else []
    return records[-1] if len(records) == len(earlier) + 1 else None


def folder_preference_pairs(
    episodes: EpisodesResult,
    spec: "EnvSpec",
    options: PreferenceOptions | None,
    teacher: Teacher,
    bank: SkillBank,
) -> StageResult[PreferencePair]:
    """`build_preference_pairs` over a rollout folder's episodes (`read_episodes`): the
    episodes the folder could not give are listed first among the rejects (they are not
    candidate pairs), and the folder's counts join the stage's."""
    result = build_preference_pairs(episodes.groups, spec, options, teacher, bank)
    result.rejects[:0] = episodes.rejects
    result.counts = dict(sorted({**episodes.counts, **result.counts}.items()))
    return result


def build_preference_pairs(
    groups: Sequence[EpisodeGroup],
    spec: "EnvSpec",
    options: PreferenceOptions | None,
    teacher: Teacher,
    bank: SkillBank,
) -> StageResult[PreferencePair]:
    """Preference pairs of every group, in group order then (winner, loser) order.

    The unit is the candidate pair asked of the teacher: `inputs` are those whose thoughts
    came back or failed, `rejected` those whose teacher calls failed; a candidate the
    post-checks drop is listed (`skipped_chosen_dropped_by_postcheck`), not a failure."""
    options = options or PreferenceOptions()
    counts: Counter[str] = Counter()
    rejects: list[Reject] = []
    candidates = find_candidates(spec, groups, bank, options, counts, rejects)
    thoughts, errors, stats = ask_thoughts(candidates, teacher, options, counts,
                                           spec.action_semantics)
    source = distill.source_of(teacher, stats)
    layout = spec.turn_layout()
    pairs: list[PreferencePair] = []
    for c in candidates:
        failed = [s.request_id for s in (c.chosen, c.rejected) if s.request_id not in thoughts]
        if failed:
            counts["skipped_teacher_failed"] += 1
            rejects.append(Reject(
                stage=STAGE, file=options.input_name, reason="teacher",
                detail=f"{c.anchor_id}: " + "; ".join(f"{r}: {errors.get(r)}" for r in failed)))
            continue
        record = stage4_record(spec, c, thoughts[c.chosen.request_id], options.render)
        if record is None:
            counts["skipped_chosen_dropped_by_postcheck"] += 1
            rejects.append(Reject(
                stage=STAGE, file=options.input_name, reason="chosen_dropped_by_postcheck",
                detail=f"{c.anchor_id}: {c.chosen.episode.trajectory_id} action "
                       f"{c.chosen.point.action!r} fails the corpus post-checks"))
            continue
        rejected = layout.output.format(thought=thoughts[c.rejected.request_id],
                                        action=c.rejected.point.action)
        pairs.append(PreferencePair(
            prompt=record.instruction,
            chosen=record.output,
            rejected=rejected,
            metadata=PairMetadata(
                env=spec.name, anchor_id=c.anchor_id, group_id=c.group.group_id,
                task=c.group.task, category=c.category,
                chosen_trajectory=c.chosen.episode.trajectory_id,
                rejected_trajectory=c.rejected.episode.trajectory_id,
                chosen_step=c.chosen.episode.steps[c.chosen.point.step].step_id,
                rejected_step=c.rejected.episode.steps[c.rejected.point.step].step_id,
                chosen_action=c.chosen.point.action, rejected_action=c.rejected.point.action,
                chosen_actions_to_end=c.chosen.actions_to_end,
                rejected_actions_to_end=c.rejected.actions_to_end,
                source=source,
            ),
        ))
    counts["pairs"] = len(pairs)
    failed = counts["skipped_teacher_failed"]
    return StageResult(
        pairs, rejects,
        stage_counts(counts, inputs=failed + len(pairs), outputs=len(pairs), rejected=failed),
        unit="preference pairs", teacher=[stats] if stats else [],
    )
