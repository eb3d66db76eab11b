"""Stage 1: rollout text -> processed trajectories (FORMATS.md sections 1-3), for any env.

`parse_rollouts(rollout_dir, spec, options)` is the one entry point. The environment's
`rollout_format` says how to find, parse and select its files; this module only drives it:
folders are parsed in a process pool (one folder per task, results consumed in folder order so
the output is identical whatever the worker count), bad files become rejects, and every
decision is counted with a datatrove-style reason name (`files_seen`, `rejected_<reason>`,
`envs_skipped_mixed`, ...). Its unit is the rollout file: `inputs` are the files seen,
`rejected` the files that failed (rejects named `skipped_*` are choices, not failures).
"""

import multiprocessing
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from tqdm import tqdm

from skillsft.pipeline.envs import ENVS, EnvSpec
from skillsft.pipeline.envs.dump_kind import check_environment
from skillsft.pipeline.errors import RolloutDirError
from skillsft.pipeline.formats.record_stream import RenderedElement
from skillsft.pipeline.formats.rollouts.kinds import GroupJob, GroupResult, RolloutFormat
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.result import StageResult, stage_counts
from skillsft.schemas import Reject, SearchTrajectorySet, TrajectorySet
from skillsft.schemas.reject import SKIP_PREFIX

ParsedRecord = TrajectorySet | SearchTrajectorySet | RenderedElement[TrajectorySet]


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _map_in_order(
    rollout_format: RolloutFormat, jobs: list[GroupJob], workers: int
) -> Iterator[GroupResult]:
    """Results in job order; a pool only when there are enough folders to pay for it."""
    if workers <= 1 or len(jobs) < 4:
        yield from map(rollout_format.parse_group, jobs)
        return
    chunksize = max(1, min(64, len(jobs) // (workers * 16)))
    with multiprocessing.get_context().Pool(workers) as pool:
        yield from pool.imap(rollout_format.parse_group, jobs, chunksize=chunksize)


def check_rollout_dir(rollout_dir: Path) -> None:
    if not rollout_dir.exists():
        raise RolloutDirError(
            f"rollout folder {rollout_dir} does not exist; set ROLLOUT_DIR (or --rollout-dir) "
            "to a folder of rollout .txt files"
        )
    if not rollout_dir.is_dir():
        raise RolloutDirError(f"rollout folder {rollout_dir} is a file, not a folder")


def check_rollouts(rollout_dir: Path, spec: EnvSpec) -> None:
    """The one check of a rollout folder: it exists, holds rollout text, and is `spec`'s
    environment's dump. The command line runs it before any work or teacher call; the parse
    stage runs it again for callers that come straight to it (a `luigi` call, the library)."""
    check_rollout_dir(rollout_dir)
    if not any(p.suffix == ".txt" for p in rollout_dir.rglob("*.txt")):
        raise RolloutDirError(
            f"no rollout files in {rollout_dir}: the folder holds no .txt rollout files; "
            f"{spec.name} expects {spec.rollout_format.layout}"
        )
    check_environment(rollout_dir, spec, list(ENVS.values()))


def parse_rollouts(
    rollout_dir: str | Path,
    spec: EnvSpec,
    options: SelectionOptions | None = None,
    *,
    workers: int | None = None,
    progress: bool = False,
) -> StageResult[TrajectorySet | SearchTrajectorySet]:
    """Parse, select and loop-trim the rollouts of one environment.

    Raises `RolloutDirError` when the folder is missing or holds no rollout files in the
    layout the environment expects; any single bad file is a reject, never an exception.
    `workers` (default: up to 2) and `progress` never change the result.
    """
    result, records = iter_parsed(rollout_dir, spec, options, workers=workers,
                                  progress=progress)
    result.records = [record.model() if isinstance(record, RenderedElement) else record
                      for record in records]
    return result


def iter_parsed(
    rollout_dir: str | Path,
    spec: EnvSpec,
    options: SelectionOptions | None = None,
    *,
    workers: int | None = None,
    progress: bool = False,
) -> tuple[StageResult[TrajectorySet | SearchTrajectorySet], Iterator[ParsedRecord]]:
    """`parse_rollouts` as a stream: the result (its records left empty) and the records, one
    at a time. The folder is checked at once; the result's rejects and counters are complete
    once the records have all been taken (stage 1's task writes them as they come). A record
    may come as its worker rendered it (`RenderedElement`: `record_stream.array_chunks` writes
    it as it is, `.model()` gives the model)."""
    options = options or SelectionOptions()
    rollout_dir = Path(rollout_dir)
    check_rollouts(rollout_dir, spec)
    counts: Counter[str] = Counter()
    rollout_format = spec.rollout_format
    groups = rollout_format.discover(rollout_dir, counts)
    if not groups:
        raise RolloutDirError(
            f"no rollout files in {rollout_dir}: {spec.name} expects {rollout_format.layout}"
        )
    options, notices = rollout_format.fit_options(groups, options, counts)
    jobs = [GroupJob(str(rollout_dir), group, options, spec.win_reward, position)
            for position, group in enumerate(groups)]
    rejects: list[Reject] = []
    result: StageResult[TrajectorySet | SearchTrajectorySet] = StageResult(
        [], rejects, unit="rollout files", notices=notices)

    def collected(results: Iterable[GroupResult]) -> Iterator[GroupResult]:
        for group_result in results:
            rejects.extend(group_result.rejects)
            counts.update(group_result.counts)
            yield group_result

    def records() -> Iterator[ParsedRecord]:
        stream = _map_in_order(rollout_format, jobs, workers or default_workers())
        bar = tqdm(stream, total=len(jobs), unit="folder", disable=not progress, desc=spec.name)
        made = 0
        for record in rollout_format.select(collected(bar), options, counts, rejects):
            made += 1
            yield record
        counts["records"] = made
        nonzero = {key: counts[key] for key in sorted(counts) if counts[key]}
        failed = sum(1 for reject in rejects if not reject.reason.startswith(SKIP_PREFIX))
        result.counts = stage_counts(nonzero, inputs=counts["files_seen"], outputs=made,
                                     rejected=failed)

    return result, records()
