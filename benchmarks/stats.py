"""Percentiles and round-by-round medians."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` by the nearest-rank method."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (NaN when empty)."""
    return statistics.median(values) if values else math.nan


def round_ratios(numerator: Sequence[Sequence[float]], denominator: Sequence[Sequence[float]]) -> float:
    """The median over rounds of p50(numerator round) / p50(denominator round)."""
    ratios = [median(a) / median(b) for a, b in zip(numerator, denominator, strict=True) if a and b]
    return median(ratios)
