"""A distribution of numbers as the run report shows it: count, mean and nearest-rank
percentiles, each percentile a value that occurs in the data (no interpolation)."""

import math
import statistics
from collections.abc import Sequence

from skillsft.schemas.report import Distribution


def distribution(values: Sequence[float]) -> Distribution:
    """Nearest-rank percentiles: each one is a value that occurs in the data."""
    if not values:
        return Distribution()
    ordered = sorted(values)

    def rank(p: float) -> float:
        return float(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)])

    return Distribution(
        count=len(ordered),
        mean=round(statistics.fmean(ordered), 2),
        min=float(ordered[0]),
        p50=rank(50),
        p90=rank(90),
        p99=rank(99),
        max=float(ordered[-1]),
    )
