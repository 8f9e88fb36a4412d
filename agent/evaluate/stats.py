"""Statistics over timing samples: a pure function, kept apart from sampling."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class TimingStats:
    n: int
    median_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    cv: float  # standard deviation / mean

    @staticmethod
    def of(samples_ms: Sequence[float]) -> "TimingStats":
        x = np.asarray(samples_ms, dtype=np.float64)
        if x.size == 0:
            raise ValueError("no timing samples")
        mean = float(x.mean())
        return TimingStats(int(x.size), float(np.median(x)), float(x.min()),
                           float(np.percentile(x, 10)), float(np.percentile(x, 90)), mean,
                           float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0)


def geomean(values: Sequence[float]) -> float:
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"geometric mean needs positive values, got {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))
