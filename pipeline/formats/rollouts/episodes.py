"""Every episode of a rollout folder, normalised exactly as stage 1 does, for anchor states.

Stage 1 keeps only what the SFT corpus uses (labelled envs, the shortest episodes, no mixed
envs by default) and its workers hand back episode names, not steps, to stay fast. Preference
pairs need the opposite: every parsed episode of every env, mixed ones above all, with its
outcome. Rather than make stage 1 carry that weight on every run (and change its output), this
module re-reads the folder with stage 1's own pieces (`discover`, the file parsers, loop
removal, the step converters), so an observation here is byte for byte the one stage 1 writes,
and a loop-removed step is gone here too.

Episodes are grouped by what makes states comparable: an env folder (ALFWorld, WebShop: one
task, one scene, several attempts) or, for Search, the question text (one file per attempt).
Which of the two a rollout format uses is data (`COLLECTORS`), never an environment name.
"""

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from skillsft.pipeline.errors import MalformedRollout, RolloutDirError
from skillsft.pipeline.formats.rollouts import kinds as formats
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.formats.rollouts.steps import parse_step_rollout
from skillsft.pipeline.formats.rollouts.text import read_rollout_text
from skillsft.schemas import Reject, Step
from skillsft.schemas.base import StrictModel

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec


class EpisodeRecord(StrictModel):
    """One attempt: its id (`envNNN/<file>` or the question file's path), outcome and steps."""

    trajectory_id: str
    won: bool
    steps: list[Step]


class EpisodeGroup(StrictModel):
    """Attempts at one and the same task whose states can be compared."""

    group_id: str
    task: str
    data_source: str | None = None
    episodes: list[EpisodeRecord]


@dataclass
class EpisodesResult:
    groups: list[EpisodeGroup]
    rejects: list[Reject] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


def _reject(
    rejects: list[Reject], counts: Counter[str], file: str, error: MalformedRollout
) -> None:
    rejects.append(Reject(stage="preferences", file=file, line=error.line, reason=error.reason,
                          detail=error.detail, hint=error.hint))
    counts[f"rejected_{error.reason}"] += 1


def collect_env_folders(
    rollout_dir: Path, win_reward: float, counts: Counter[str], rejects: list[Reject]
) -> list[EpisodeGroup]:
    """One group per env folder, every parsable episode in it, loops removed as in stage 1."""
    groups = []
    for group in formats.discover_env_folders(rollout_dir, counts):
        episodes: list[EpisodeRecord] = []
        tasks: list[str] = []
        for name in group.files:
            rel = f"{group.group_id}/{name}"
            try:
                parsed = parse_step_rollout(read_rollout_text(rollout_dir / rel))
            except MalformedRollout as error:
                _reject(rejects, counts, rel, error)
                continue
            trimmed = formats.without_loops(parsed.steps)
            counts["loop_steps_removed"] += len(parsed.steps) - len(trimmed)
            tasks.append(parsed.task)
            episodes.append(EpisodeRecord(
                trajectory_id=rel, won=parsed.succeeded(win_reward),
                steps=[formats.to_step(raw) for raw in trimmed],
            ))
        if episodes:
            counts["groups_task_mismatch"] += len(set(tasks)) > 1
            groups.append(EpisodeGroup(group_id=group.group_id, task=tasks[0], episodes=episodes))
    return groups


def collect_questions(
    rollout_dir: Path, win_reward: float, counts: Counter[str], rejects: list[Reject]
) -> list[EpisodeGroup]:
    """One group per distinct question text; each question file is one attempt."""
    by_question: dict[str, EpisodeGroup] = {}
    options = SelectionOptions()
    for group in formats.discover_question_folders(rollout_dir, counts):
        job = formats.GroupJob(str(rollout_dir), group, options, win_reward)
        result = formats.parse_question_folder(job)
        rejects.extend(r.model_copy(update={"stage": "preferences"}) for r in result.rejects)
        counts.update({k: v for k, v in result.counts.items() if k.startswith("rejected_")})
        for candidate in sorted(result.candidates, key=lambda c: c.env_id):
            record = formats.to_search_set(candidate)
            episode = EpisodeRecord(trajectory_id=record.env_id, won=candidate.won,
                                    steps=list(record.trajectories[0]))
            question = by_question.setdefault(record.task, EpisodeGroup(
                group_id=record.env_id, task=record.task, data_source=record.data_source,
                episodes=[]))
            question.episodes.append(episode)
    return list(by_question.values())


Collector = Callable[[Path, float, Counter[str], list[Reject]], list[EpisodeGroup]]
# Per rollout format (`RolloutFormat.name`): how its episodes are read and grouped.
COLLECTORS: dict[str, Collector] = {"steps": collect_env_folders, "search": collect_questions}


def collect_episodes(spec: "EnvSpec", rollout_dir: str | Path) -> EpisodesResult:
    """Every episode under `rollout_dir`, grouped; a bad file is a reject, never an exception.

    Raises `RolloutDirError` when the folder holds no episode at all. The folder itself (it
    exists, it is `spec`'s environment's dump) is checked by the caller, as stage 1 checks it:
    `stages.preferences.read_episodes`.
    """
    rollout_dir = Path(rollout_dir)
    counts: Counter[str] = Counter()
    rejects: list[Reject] = []
    groups = COLLECTORS[spec.rollout_format.name](rollout_dir, spec.win_reward, counts, rejects)
    if not groups:
        raise RolloutDirError(f"no readable rollout episode in {rollout_dir}")
    counts["groups"] = len(groups)
    counts["episodes"] = sum(len(g.episodes) for g in groups)
    counts["episodes_won"] = sum(e.won for g in groups for e in g.episodes)
    return EpisodesResult(groups, rejects, counts)


def outcomes(episodes: Sequence[EpisodeRecord]) -> tuple[list[EpisodeRecord], list[EpisodeRecord]]:
    """(wins, losses) in input order."""
    return [e for e in episodes if e.won], [e for e in episodes if not e.won]
