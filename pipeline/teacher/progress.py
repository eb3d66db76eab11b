"""Counting what a batch did and cost, shown live on a tqdm bar and returned as BatchStats.

Both teachers report through this one path, so offline and openai runs show and total the same
things. Tokens and dollars count the calls paid for in this run; answers reused from the journal
(paid by an earlier run) are counted apart, as `reused_*`.

The bar's figures are recomputed at most every `POSTFIX_SECONDS` and never when no bar is shown:
every call start and end reports here, and recomputing them (the oldest call in flight is a walk
over all of them) on each of those was a cost per request that nobody saw.
"""

import time

from tqdm.auto import tqdm

from skillsft.pipeline.teacher.base import BatchStats, TeacherResult
from skillsft.pipeline.teacher.failures import failure_kind
from skillsft.pipeline.teacher.pricing import PriceTable

POSTFIX_SECONDS = 0.2  # tqdm redraws at most every 0.1 s; its figures need not be fresher


class BatchTracker:
    def __init__(
        self,
        stage: str,
        model: str,
        total: int,
        *,
        prices: PriceTable | None = None,
        show_progress: bool = True,
    ) -> None:
        self.stats = BatchStats(stage=stage, model=model)
        self._prices = prices or PriceTable()
        self._price_known = self._prices.knows(model)
        if self._price_known:
            self.stats.cost_usd = 0.0
            self.stats.reused_cost_usd = 0.0
        self._done = 0
        self._in_flight: dict[str, float] = {}  # request id -> when its current call started
        self._bar = tqdm(
            total=total, desc=f"teacher {stage}", unit="req", disable=not show_progress
        )
        self._shown = show_progress
        self._postfix_due = 0.0  # monotonic time the bar's figures may be recomputed

    def expect(self, total: int) -> None:
        """A stream's bar: the requests built so far are its total (the last known at the end)."""
        self._bar.total = total

    def call_started(self, request_id: str, at: float) -> None:
        """A call went out (the bar shows calls in flight and the age of the oldest)."""
        self._in_flight[request_id] = at

    def call_ended(self, request_id: str) -> None:
        self._in_flight.pop(request_id, None)
        self._show_postfix()

    def paid(self, model: str, prompt_tokens: int, completion_tokens: int,
             cached_prompt_tokens: int = 0) -> None:
        """Count one new (billable) call; `cached_prompt_tokens` of its prompt were cached."""
        self.stats.calls_new += 1
        self.stats.prompt_tokens += prompt_tokens
        self.stats.completion_tokens += completion_tokens
        self.stats.cached_prompt_tokens += cached_prompt_tokens
        cost = self._prices.cost(model, prompt_tokens, completion_tokens, cached_prompt_tokens)
        if cost is not None and self.stats.cost_usd is not None:
            self.stats.cost_usd += cost
        elif cost is None:
            self.stats.cost_usd = None  # one call at an unknown price makes the total unknown

    def finished(self, result: TeacherResult) -> None:
        """Count one request that reached its final state."""
        self._done += 1
        if result.from_journal:
            self.stats.calls_from_journal += 1
            self.stats.reused_prompt_tokens += result.prompt_tokens
            self.stats.reused_completion_tokens += result.completion_tokens
            self.stats.reused_cached_prompt_tokens += result.cached_prompt_tokens
            cost = self._prices.cost(self.stats.model, result.prompt_tokens,
                                     result.completion_tokens, result.cached_prompt_tokens)
            if cost is not None and self.stats.reused_cost_usd is not None:
                self.stats.reused_cost_usd += cost
        if not result.ok:
            self.stats.calls_failed += 1
            self.stats.retryable_failures += int(result.retryable)
            kind = failure_kind(result.error or "unknown")
            self.stats.failures[kind] = self.stats.failures.get(kind, 0) + 1
        self._bar.update(1)
        self._show_postfix()

    def _show_postfix(self, *, now: bool = False) -> None:
        """Give the bar fresh figures, unless no bar is shown or they were given just now."""
        if not self._shown:
            return
        clock = time.monotonic()
        if now or clock >= self._postfix_due:
            self._postfix_due = clock + POSTFIX_SECONDS
            self._bar.set_postfix(self.postfix(), refresh=False)

    def postfix(self) -> dict[str, str]:
        cost = self.stats.cost_usd
        return {
            "done": str(self._done - self.stats.calls_failed),
            "failed": str(self.stats.calls_failed),
            "tokens": str(self.stats.prompt_tokens + self.stats.completion_tokens),
            "usd": "unknown" if cost is None else f"{cost:.4f}",
            "in_flight": str(len(self._in_flight)),
            "oldest": f"{time.monotonic() - min(self._in_flight.values()):.0f}s"
            if self._in_flight else "-",
        }

    def close(self) -> BatchStats:
        self._show_postfix(now=True)  # the last figures, whenever the last ones were given
        self._bar.close()
        return self.stats
