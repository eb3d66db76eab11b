"""The two rollout formats stage 1 reads, each as data: how to find, parse and select files.

ALFWorld and WebShop share `STEP_FORMAT` (env folders of step-format episodes); Search uses
`SEARCH_FORMAT` (one question per file, any depth). An `EnvSpec` names its format and its
success reward; `stages.parse.parse_rollouts` drives either one the same way:

    discover(rollout_dir, counts) -> groups       main process, sorted, cheap
    parse_group(job) -> GroupResult               worker process, one folder at a time
    select(results, options, counts) -> records   main process, consumes results in order

A worker returns only what selection can still use. For env folders that is the label, the
names of the episodes to keep and, when the env is kept for sure (its folder's place is below
its label's quota: every env when the quotas exceed the folders), the record it becomes,
loops already cut, rendered as it stands in the stage file (`record_stream.render_element`):
one bytes object crosses the process boundary for the price of a copy (pickling step objects
cost more than parsing them), and the main process neither parses those files again nor
builds and renders the record's models; it writes the bytes. Any other env carries no record:
most of them fall outside the quotas, and the few kept are parsed again in the main process.
Memory follows the kept records, not the corpus.
"""

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path, PurePosixPath
from typing import Any

from skillsft.pipeline.errors import MalformedRollout
from skillsft.pipeline.formats.record_stream import RenderedElement, render_element
from skillsft.pipeline.formats.rollouts.loops import remove_loops
from skillsft.pipeline.formats.rollouts.search import SearchEpisode, parse_search_rollout
from skillsft.pipeline.formats.rollouts.selection import (
    EnvLabel,
    SelectionOptions,
    apply_env_quotas,
    balance_by_source,
    env_quotas,
    label_env,
    resolve_source,
    shortest_episodes,
)
from skillsft.pipeline.formats.rollouts.steps import Episode, RawStep, parse_step_rollout
from skillsft.pipeline.formats.rollouts.text import natural_key, read_rollout_text
from skillsft.schemas import Reject, SearchStep, SearchTrajectorySet, Step, TrajectorySet

STAGE = "parse"
ROLLOUT_SUFFIX = ".txt"
# QA sources a Search folder name may carry (FORMATS.md 2).
QA_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


@dataclass(frozen=True)
class Group:
    """Files parsed together by one worker call: an env folder, or one folder of questions."""

    group_id: str  # relative posix path of the folder ("" for ROLLOUT_DIR itself)
    files: tuple[str, ...]  # file names inside the folder, natural order


@dataclass(frozen=True)
class GroupJob:
    rollout_dir: str
    group: Group
    options: SelectionOptions
    success_reward: float
    # The folder's place among the groups: at most this many envs come before it, so an env
    # below its label's quota here is kept whatever the folders before it hold.
    position: int = 0


@dataclass
class GroupResult:
    candidates: list[Any] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class RolloutFormat:
    name: str
    layout: str  # what ROLLOUT_DIR should hold, for error messages
    discover: Callable[[Path, Counter[str]], list[Group]]
    parse_group: Callable[[GroupJob], GroupResult]
    # Appends a `skipped_<reason>` reject for each env or question selection leaves out.
    # May return a lazy iterable: its records, rejects and counters are complete once it has
    # been consumed (env folders build each kept record from disk only when it is reached).
    select: Callable[
        [Iterable[GroupResult], SelectionOptions, Counter[str], list[Reject]], Iterable[Any]
    ]
    # Fits the selection rules to the shape of the dump found (main process, after discover);
    # returns the options to use and notices saying what was found and how it selects.
    fit_options: Callable[
        [list[Group], SelectionOptions, Counter[str]], tuple[SelectionOptions, list[str]]
    ] = lambda groups, options, counts: (options, [])


def _reject(result: GroupResult, rel_file: str, error: MalformedRollout) -> None:
    result.rejects.append(
        Reject(
            stage=STAGE,
            file=rel_file,
            line=error.line,
            reason=error.reason,
            detail=error.detail,
            hint=error.hint,
        )
    )
    result.counts[f"rejected_{error.reason}"] += 1


def _skip(result: GroupResult, where: str, reason: str, detail: str) -> None:
    """A selection skip: listed in the rejects file, but not a failure of the file."""
    result.rejects.append(
        Reject(stage=STAGE, file=where, trajectory=where, reason=f"skipped_{reason}", detail=detail)
    )


def _sorted_entries(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as entries:
        return sorted(entries, key=lambda entry: natural_key(entry.name))


def _rollout_files(folder: Path, counts: Counter[str]) -> tuple[list[str], list[Path]]:
    """(.txt file names, sub-folders) of one folder; everything else is counted and ignored."""
    files: list[str] = []
    dirs: list[Path] = []
    for entry in _sorted_entries(folder):
        if entry.is_dir():
            dirs.append(Path(entry.path))
        elif entry.name.endswith(ROLLOUT_SUFFIX):
            files.append(entry.name)
        else:
            counts["ignored_non_txt"] += 1
    return files, dirs


# ---- ALFWorld / WebShop: env folders ---------------------------------------------------------

ENV_DIR = re.compile(r"env\d+")


def discover_env_folders(rollout_dir: Path, counts: Counter[str]) -> list[Group]:
    """`ROLLOUT_DIR/envNNN/*.txt`; other folders and stray files are counted, not read."""
    top_files, dirs = _rollout_files(rollout_dir, counts)
    counts["ignored_txt_outside_env_dir"] += len(top_files)
    groups: list[Group] = []
    for folder in dirs:
        if not ENV_DIR.fullmatch(folder.name):
            counts["ignored_other_dirs"] += 1
            continue
        files, nested = _rollout_files(folder, counts)
        counts["ignored_other_dirs"] += len(nested)
        counts["files_seen"] += len(files)
        if files:
            groups.append(Group(folder.name, tuple(files)))
    return groups


def fit_single_episode_envs(
    groups: list[Group], options: SelectionOptions, counts: Counter[str]
) -> tuple[SelectionOptions, list[str]]:
    """A dump with one episode in every env folder (how most agent harnesses write, e.g. the
    ReAct WebShop run) can never meet rules that need several attempts per env: label each env
    by its only episode instead of selecting nothing."""
    if not groups or any(len(group.files) != 1 for group in groups):
        return options, []
    counts["envs_labelled_by_only_episode"] = len(groups)
    fitted = options.model_copy(update={"min_trajs_per_env": 1, "label_min_outcomes": 1})
    return fitted, [
        f"every env folder holds one episode ({len(groups)} folders): each env is labelled by "
        "its only episode (a win: all_success, a loss: all_fail), instead of needing "
        f"{options.min_trajs_per_env} files and {options.label_min_outcomes} outcomes per env"
    ]


@dataclass(frozen=True)
class EnvRecord:
    """An env's `TrajectorySet`, its kept episodes' loops cut, rendered for the stage file
    (`render_element`), and its counters (counted only if the quotas keep the env)."""

    element: bytes
    episodes: int
    steps: int
    loop_steps_removed: int


def env_record(env_id: str, task: str, label: EnvLabel,
               episodes: list[list[RawStep]]) -> EnvRecord:
    trimmed = [without_loops(steps) for steps in episodes]
    steps = sum(map(len, trimmed))
    # A `TrajectorySet`'s fields in its order; a `RawStep`'s fields are a `Step`'s.
    element = render_element({"env_id": env_id, "task": task, "type": label,
                              "trajectories": trimmed})
    return EnvRecord(element, len(trimmed), steps, sum(map(len, episodes)) - steps)


@dataclass(frozen=True)
class EnvCandidate:
    """One env folder after labelling: where it is, its task and which episodes to keep."""

    folder: str
    env_id: str
    label: EnvLabel
    task: str
    keep: tuple[str, ...]
    # Built by the worker when the env is kept for sure (`GroupJob.position`); else None, and
    # the main process builds it from the kept files only if the quotas keep the env, so the
    # many envs a small quota leaves out never cost a rendering or a transfer.
    record: EnvRecord | None


def parse_env_folder(job: GroupJob) -> GroupResult:
    """Parse every episode of one env folder, label the env and keep its shortest episodes."""
    result = GroupResult()
    folder = Path(job.rollout_dir, job.group.group_id)
    parsed: list[tuple[str, Episode]] = []
    for name in job.group.files:
        try:
            episode = parse_step_rollout(read_rollout_text(folder / name, job.options.max_file_mb))
        except MalformedRollout as error:
            _reject(result, f"{job.group.group_id}/{name}", error)
            continue
        result.counts["files_parsed"] += 1
        result.counts["episodes_stopped_at_step_limit"] += episode.stopped_at_step_limit
        parsed.append((name, episode))
    result.counts["envs_seen"] += 1
    if len(parsed) < job.options.min_trajs_per_env:
        result.counts["envs_skipped_too_few_files"] += 1
        _skip(result, job.group.group_id, "too_few_files",
              f"{len(parsed)} parsed episode(s); --min-trajs-per-env is "
              f"{job.options.min_trajs_per_env}")
        return result
    won = [episode.succeeded(job.success_reward) for _, episode in parsed]
    label = label_env(sum(won), len(won) - sum(won), job.options)
    if label == "unlabelled":
        result.counts["envs_skipped_unlabelled"] += 1
        _skip(result, job.group.group_id, "unlabelled",
              f"{sum(won)} win(s), {len(won) - sum(won)} loss(es): neither reaches "
              f"--label-min-outcomes {job.options.label_min_outcomes}")
        return result
    summary = [(name, len(ep.steps), w) for (name, ep), w in zip(parsed, won, strict=True)]
    keep = shortest_episodes(summary, label, job.options)
    result.counts["trajectories_off_label"] += sum(
        1 for w in won if label != "mixed" and w != (label == "all_success")
    )
    if len({episode.task for _, episode in parsed}) > 1:
        result.counts["envs_task_mismatch"] += 1
    task = parsed[keep[0]][1].task
    quota = env_quotas(job.options)[label]
    record = None
    if quota is None or job.position < quota:
        record = env_record(job.group.group_id, task, label,
                            [parsed[index][1].steps for index in keep])
    result.candidates.append(EnvCandidate(
        str(folder), job.group.group_id, label, task, tuple(parsed[i][0] for i in keep), record))
    return result


def reread_env_record(candidate: EnvCandidate, max_file_mb: float) -> EnvRecord:
    """The record of a kept env its worker could not know would be kept: the kept files are
    parsed again (they parsed in the worker)."""
    folder = Path(candidate.folder)
    episodes = [parse_step_rollout(read_rollout_text(folder / name, max_file_mb)).steps
                for name in candidate.keep]
    return env_record(candidate.env_id, candidate.task, candidate.label, episodes)


def without_loops(steps: list[RawStep]) -> list[RawStep]:
    """One episode's steps with its repeated cycles cut (loops.py), as stage 1 keeps them."""
    return remove_loops(steps, attrgetter("action"), attrgetter("done"))


def to_step(raw: RawStep) -> Step:
    return Step(
        step_id=raw.step_id,
        action=raw.action,
        observation=raw.observation,
        admissible_actions=raw.admissible_actions,
        reward=raw.reward,
        done=raw.done,
        metadata=raw.metadata,
    )


def select_env_folders(
    results: Iterable[GroupResult],
    options: SelectionOptions,
    counts: Counter[str],
    rejects: list[Reject],
) -> Iterator[RenderedElement[TrajectorySet]]:
    """The kept env folders' records, in order, as their workers rendered them (`model()`
    gives the `TrajectorySet`), so stage 1 holds one record at a time. A kept env's record is
    passed on as soon as its folder's result arrives, while the workers parse the folders after
    it; the envs the quotas leave out are listed after the last result, as before."""

    def labelled() -> Iterable[tuple[EnvLabel, EnvCandidate]]:
        for result in results:
            for candidate in result.candidates:
                yield candidate.label, candidate

    left_out: list[tuple[str, EnvLabel, str]] = []  # (env id, label, reason): no records

    def skip(candidate: EnvCandidate, reason: str) -> None:
        left_out.append((candidate.env_id, candidate.label, reason))

    for candidate in apply_env_quotas(labelled(), options, counts, skip):
        record = candidate.record or reread_env_record(candidate, options.max_file_mb)
        counts["loop_steps_removed"] += record.loop_steps_removed
        counts["trajectories_kept"] += record.episodes
        counts["steps_kept"] += record.steps
        yield RenderedElement(record.element, TrajectorySet)
    for env_id, label, reason in left_out:
        rejects.append(Reject(
            stage=STAGE, file=env_id, trajectory=env_id,
            reason=f"skipped_{reason.removeprefix('skipped_')}",
            detail=f"{label} env left out by the selection quotas (--n-success-envs, "
                   "--n-fail-envs, --include-mixed)",
        ))


STEP_FORMAT = RolloutFormat(
    name="steps",
    layout="env folders ROLLOUT_DIR/envNNN/ holding one <episode>.txt per attempt",
    discover=discover_env_folders,
    parse_group=parse_env_folder,
    select=select_env_folders,
    fit_options=fit_single_episode_envs,
)


# ---- Search: one question per file, any folder depth -----------------------------------------


def discover_question_folders(rollout_dir: Path, counts: Counter[str]) -> list[Group]:
    """Every folder under ROLLOUT_DIR holding .txt files, depth-first in natural order."""
    groups: list[Group] = []
    pending = [rollout_dir]
    while pending:
        folder = pending.pop()
        files, dirs = _rollout_files(folder, counts)
        counts["files_seen"] += len(files)
        if files:
            rel = folder.relative_to(rollout_dir).as_posix()
            groups.append(Group("" if rel == "." else rel, tuple(files)))
        pending.extend(reversed(dirs))
    return groups


@dataclass(frozen=True)
class QuestionCandidate:
    env_id: str
    data_source: str
    episode: SearchEpisode
    won: bool


def parse_question_folder(job: GroupJob) -> GroupResult:
    """Parse each question file of one folder and resolve its QA source."""
    result = GroupResult()
    folder = Path(job.rollout_dir, job.group.group_id)
    for name in job.group.files:
        rel = PurePosixPath(job.group.group_id, name)
        try:
            text = read_rollout_text(folder / name, job.options.max_file_mb)
            episode = parse_search_rollout(text)
        except MalformedRollout as error:
            _reject(result, rel.as_posix(), error)
            continue
        result.counts["files_parsed"] += 1
        source, rule = resolve_source(rel, QA_SOURCES, job.options)
        result.counts[f"source_rule_{rule}"] += 1
        env_id = rel.with_suffix("").as_posix()
        won = episode.reward >= job.success_reward
        result.candidates.append(QuestionCandidate(env_id, source, episode, won))
    return result


def to_search_set(candidate: QuestionCandidate) -> SearchTrajectorySet:
    episode = candidate.episode
    steps = [
        SearchStep(
            step_id=raw.step_id,
            action=raw.action,
            observation=raw.information,
            reward=raw.reward,
            done=raw.done,
            memory_context=raw.memory_context,
        )
        for raw in episode.steps
    ]
    return SearchTrajectorySet(
        env_id=candidate.env_id,
        task=episode.question,
        type="all_success" if candidate.won else "all_fail",
        data_source=candidate.data_source,
        outcome="Success" if candidate.won else "Failure",
        reward=episode.reward,
        trajectories=[steps],
    )


def select_questions(
    results: Iterable[GroupResult],
    options: SelectionOptions,
    counts: Counter[str],
    rejects: list[Reject],
) -> list[SearchTrajectorySet]:
    questions = [
        (c.env_id, c.data_source, c.won, c)
        for result in results
        for c in result.candidates
    ]
    skipped: list[tuple[QuestionCandidate, str]] = []
    kept = balance_by_source(questions, options, counts, skipped)
    rejects.extend(
        Reject(stage=STAGE, file=f"{c.env_id}.txt", trajectory=c.env_id,
               reason=f"skipped_{reason}",
               detail=f"failure from {c.data_source} beyond --failure-ratio "
                      f"{options.failure_ratio:g} x its successes")
        for c, reason in skipped
    )
    records = [to_search_set(candidate) for candidate in kept]
    counts["trajectories_kept"] += len(records)
    counts["steps_kept"] += sum(len(r.trajectories[0]) for r in records)
    return records


SEARCH_FORMAT = RolloutFormat(
    name="search",
    layout="one <question>.txt per question, in ROLLOUT_DIR or folders below it",
    discover=discover_question_folders,
    parse_group=parse_question_folder,
    select=select_questions,
)
