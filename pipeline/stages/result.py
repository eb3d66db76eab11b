"""What every stage function returns: one shape, so tasks, the failure rule and the report
read any stage the same way.

Every stage function is called `stage(inputs, spec, options[, teacher][, extras])` and returns
a `StageResult`. Its counters always hold three fixed names, in the stage's own unit (`unit`):

- `inputs`: the items the stage tried to turn into output (a rollout file, a trajectory, a
  conversation, ...); items it chose not to use (`skipped_<reason>`) are not inputs;
- `outputs`: the records it made;
- `rejected`: the inputs that failed, each with a line in `rejects`.

The other counters are the stage's own, named datatrove style (`dropped_<reason>`,
`skipped_<reason>`, `failed_<reason>`, ...). `rejects` may list more than the failures: items
skipped by choice and turns dropped by post-checks are listed too, but do not count as
`rejected`. The failure rule (`outcome.py`) reads only the three fixed counters.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from skillsft.pipeline.formats.record_files import LoadedRecords
from skillsft.pipeline.teacher.base import BatchStats
from skillsft.schemas import Reject

T = TypeVar("T")

INPUTS, OUTPUTS, REJECTED = "inputs", "outputs", "rejected"
FIXED_COUNTERS = (INPUTS, OUTPUTS, REJECTED)


@dataclass
class StageResult(Generic[T]):
    """Records (in output order), rejects, counters, teacher usage and notices of one stage."""

    records: list[T]
    rejects: list[Reject] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    unit: str = "items"  # what `inputs` counts, for messages: "trajectories", "rollout files"
    teacher: list[BatchStats] = field(default_factory=list)  # one entry per teacher batch
    notices: list[str] = field(default_factory=list)  # what the user should know, one line each
    # Stage-specific by-products that are not records (flatten's provenance lines, aggregate's
    # calls per track); named, so a reader asks for what it knows.
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> int:
        return self.counts.get(INPUTS, 0)

    @property
    def outputs(self) -> int:
        return self.counts.get(OUTPUTS, 0)

    @property
    def rejected(self) -> int:
        return self.counts.get(REJECTED, 0)

    def absorb_load(self, loaded: LoadedRecords[Any]) -> None:
        """Put the loader's rejects (records that did not validate) in front of this result's:
        each was an input that failed, so `inputs` and `rejected` grow by their number."""
        self.rejects[:0] = loaded.rejects
        merged = {**loaded.counts, **self.counts}
        merged[INPUTS] = self.inputs + len(loaded.rejects)
        merged[REJECTED] = self.rejected + len(loaded.rejects)
        self.counts = dict(sorted(merged.items()))


@dataclass
class RejectPhase:
    """The rejects of one phase of a stage that streams (memories, distillation: the phases are
    listed one after the other, each in input order; pipeline/stages/shards.py), gathered apart
    while the phases interleave, with the (phase, position) of each for a shard's merge."""

    phase: int
    rejects: list[Reject] = field(default_factory=list)
    order: list[tuple[int, int]] = field(default_factory=list)

    def add(self, reject: Reject, position: int) -> None:
        self.rejects.append(reject)
        self.order.append((self.phase, position))


def stage_counts(counts: Mapping[str, int], *, inputs: int, outputs: int,
                 rejected: int) -> dict[str, int]:
    """The stage's own counters plus the three fixed ones, sorted by name."""
    return dict(sorted({**counts, INPUTS: inputs, OUTPUTS: outputs, REJECTED: rejected}.items()))
