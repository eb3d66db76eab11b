"""--max-cost: a budget in dollars the teacher stages of one command may not pass.

Before a stage's requests go out, their estimated price (estimate.py: journal hits are free)
is added to what this command has spent so far; over the budget, the stage stops before paying
anything. While it runs, the live teacher works through the requests in chunks of a few
concurrency windows and stops once the spend reaches the budget, so the overshoot is at most
one chunk; every answer received is in the journal, and a re-run with a higher budget goes on
from there. (A Batch API stage is checked before it submits: a batch cannot be half paid.)
A stage that streams its requests (base.answer_stream) has them collected here first, since
the estimate needs all of them, and gets its results chunk by chunk.

The spend of one command is kept in a file of its own (the CLI names it), because the stages
may run in several Luigi worker processes; appends are serialised by a claim (claims.py).
"""

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from skillsft.pipeline.durable import write_all
from skillsft.pipeline.errors import ConfigError, SkillsftError
from skillsft.pipeline.teacher.base import (
    AnswerStream,
    BatchStats,
    TeacherRequest,
    TeacherResult,
)
from skillsft.pipeline.teacher.claims import exclusive_beside
from skillsft.pipeline.teacher.estimate import price_requests


class BudgetExceeded(SkillsftError):  # noqa: N818 - reads as what happened
    """The budget stopped a stage; finished answers are kept in the journal."""


class SpendFile:
    """Dollars spent by the stages of one command, one JSON line per teacher batch."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def add(self, stage: str, usd: float) -> None:
        with exclusive_beside(self.path):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                write_all(fd, orjson.dumps({"stage": stage, "usd": usd}) + b"\n")
            finally:
                os.close(fd)

    def total(self) -> float:
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return 0.0
        return sum(orjson.loads(line)["usd"] for line in lines if line.strip())


class BudgetedTeacher:
    def __init__(self, inner: Any, *, budget_usd: float, spend: SpendFile, chunk: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.budget = budget_usd
        self.spend = spend
        self.chunk = max(1, chunk)

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], BatchStats]:
        stream = self.stream_batch(requests, stage=stage)
        results = list(stream)
        return results, stream.stats

    def stream_batch(
        self, requests: Iterable[TeacherRequest[Any]], *, stage: str
    ) -> AnswerStream:
        """The stream of a budgeted stage collects its requests first: the estimate that must
        pass before anything is paid needs all of them. Then they go to the inner teacher one
        chunk at a time and the results stream out as each chunk ends."""
        requests = list(requests)
        self._check_estimate(requests, stage)
        stream = AnswerStream(BatchStats(stage=stage, model=self.inner.model, cost_usd=0.0,
                                         reused_cost_usd=0.0))
        stream.results = self._chunks(requests, stage, stream.stats)
        return stream

    def _check_estimate(self, requests: Sequence[TeacherRequest[Any]], stage: str) -> None:
        inner = self.inner
        priced = price_requests(
            requests, stage=stage, model=inner.model, journal=inner.journal,
            key_for=inner.key_for, reask_limit=inner.settings.reask_limit, prices=inner.prices,
        ).estimate
        if priced.usd_live is None:
            raise ConfigError(
                f"--max-cost: model {inner.model!r} has no price in the table; add it with "
                "--prices FILE so the budget can be kept"
            )
        spent = self.spend.total()
        if spent + priced.usd_live > self.budget:
            raise BudgetExceeded(
                f"{stage}: {priced.to_send} requests estimated at ${priced.usd_live:.4f} would "
                f"pass --max-cost ${self.budget:g} (${spent:.4f} spent so far by this command); "
                "nothing was sent: raise --max-cost, or see `skillsft estimate`"
            )

    def _chunks(self, requests: Sequence[TeacherRequest[Any]], stage: str,
                stats: BatchStats) -> Iterator[TeacherResult[Any]]:
        for start in range(0, len(requests), self.chunk):
            spent = self.spend.total()
            if spent >= self.budget:
                raise BudgetExceeded(
                    f"{stage}: stopped at ${spent:.4f}, the --max-cost ${self.budget:g} budget, "
                    f"after {start} of {len(requests)} requests (their answers are kept in the "
                    "journal): raise --max-cost and re-run to finish"
                )
            part, part_stats = self.inner.run_batch(requests[start:start + self.chunk],
                                                    stage=stage)
            self.spend.add(stage, part_stats.cost_usd or 0.0)
            stats.absorb(part_stats)
            yield from part
