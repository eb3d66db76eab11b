"""Whether a stage's result may be used: the one rule every stage applies after its work.

It lives here and only here; `tasks/base.py StageTask.run` applies it once per stage, reading
the result's fixed counters (`inputs`, `outputs`, `rejected`, see result.py).

A stage that made nothing from a non-empty input, or lost more of its items than
`--max-failure-rate` allows, fails with one self-sufficient line naming the stage, its input,
the most common reject reasons and the rejects file. The rejects file is written before this
check (tasks/base.py), so the line points at a file that exists.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from skillsft.pipeline.errors import EmptyOutput, TooManyFailures
from skillsft.pipeline.stages.result import StageResult
from skillsft.schemas import Reject

# --max-failure-rate when not given: the share of a stage's items that may fail.
DEFAULT_MAX_FAILURE_RATE = 0.10


@dataclass(frozen=True)
class StageOutcome:
    """What a stage attempted and what came of it, in the unit its failure rate is counted in."""

    stage: str
    input_name: str  # the file or folder the stage read, as the user knows it
    unit: str  # what `attempted` counts: "rollout files", "trajectories", "conversations"
    attempted: int
    failed: int
    produced: int
    rejects: Sequence[Reject] = field(default_factory=tuple)


def outcome_of(result: StageResult[object], stage: str, input_name: str) -> StageOutcome:
    """The outcome a result's fixed counters describe; no stage builds one by hand."""
    return StageOutcome(stage, input_name, result.unit, result.inputs, result.rejected,
                        result.outputs, result.rejects)


def common_reasons(rejects: Sequence[Reject], limit: int = 3) -> str:
    """`truncated x3, no_task x1`: the reasons users see first, most frequent first."""
    counts = Counter(reject.reason for reject in rejects)
    return ", ".join(f"{reason} x{n}" for reason, n in counts.most_common(limit))


def check_outcome(outcome: StageOutcome, max_failure_rate: float, rejects_file: str) -> None:
    """Raise `EmptyOutput` or `TooManyFailures` when the stage's output must not be used."""
    reasons = common_reasons(outcome.rejects) or "no reject recorded"
    where = f"{outcome.stage}: {outcome.input_name}"
    see = f"see {rejects_file}"
    if outcome.attempted and not outcome.produced:
        raise EmptyOutput(
            f"{where}: produced no record from {outcome.attempted} {outcome.unit} "
            f"(most common reasons: {reasons}); {see}"
        )
    if outcome.attempted and outcome.failed / outcome.attempted > max_failure_rate:
        raise TooManyFailures(
            f"{where}: {outcome.failed} of {outcome.attempted} {outcome.unit} failed "
            f"({outcome.failed / outcome.attempted:.0%}, more than --max-failure-rate "
            f"{max_failure_rate:g}; most common reasons: {reasons}); {see}; fix the input or "
            "raise --max-failure-rate, then re-run (answered teacher calls are reused)"
        )
