"""The timing policy, every number of it in one place: how a case is timed, when a timing
stops, when a candidate is rejected early, when a challenger beats the best, when a time
is too fast to believe, and how long a timing step may take.

How a case is timed (DESIGN.md, Evaluation). `TimingConfig` is the recipe; the C++ loop
(native/timing.cpp) applies it as its stop rule: WARMUP launches (capped at
WARMUP_SHARE of the time budget by the first launch's time), then REPETITIONS launches,
each between its own event pair with L2 flushed before it, stopping early when the
warm-up's mean says the budget (MAX_TOTAL_MS) would be passed, but never before
MIN_REPETITIONS launches. The budget keeps an evaluation near a second without
changing the median of a stable kernel.

Early rejection (agent/evaluate/early_reject.py applies it): a first chunk of
SCREEN_LAUNCHES launches after SCREEN_WARMUP, judged by its lower_rank-th fastest
launch against the best by MARGIN. The chunk is a request of its own, run before the
validation, because three candidates in four end there and a rejected one is never
validated; a kept one is validated before its full timing, so a kernel wrong on a
small case never costs a full timing.

The noise model (agent/evaluate/selection.py applies it): a score under CLEAR_WIN x the
best wins outright; between that and the best, both are re-timed ROUNDS times,
interleaved, and the challenger wins only under CONFIRM x the best. The repeat CV of a
median is about 0.1% on the H200 (benchmarks/harness.py), so CONFIRM is five times it.

The floor gate (agent/spec/speed_of_light.py applies it): a median under SUSPECT_MARGIN
x the speed-of-light floor is physically impossible and flags the result `suspect`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

WARMUP = 10
REPETITIONS = 100
MAX_TOTAL_MS = 300.0
MIN_REPETITIONS = 10
WARMUP_SHARE = 0.25

# The first chunk: a short warm-up (the L2 flush makes every launch cold anyway) and 11 launches.
SCREEN_WARMUP = 3
SCREEN_LAUNCHES = 11
MARGIN = 0.05
CONFIDENCE = 1e-3  # at most this chance that a case's bound lies above its median

CLEAR_WIN = 0.97
CONFIRM = 0.995
ROUNDS = 2

SUSPECT_MARGIN = 0.97  # 3% of timing noise before "faster than the floor" is a red flag


@dataclass(frozen=True)
class TimingConfig:
    """The timing recipe as the evaluator asks for it. The worker turns it into the runner's
    ``TimingSettings`` (worker/gpu_side.py); this twin exists because a message on the
    worker's pipe must pickle, and the runner's objects do not."""

    warmup: int = WARMUP
    repetitions: int = REPETITIONS
    cold_l2: bool = True
    max_total_ms: float = MAX_TOTAL_MS
    min_repetitions: int = MIN_REPETITIONS
    warmup_share: float = WARMUP_SHARE

    def step_deadline_s(self, kernel_timeout_s: float, per_launch_s: float) -> float:
        """How long one case's timing may take: the warm-up and the measured launches are
        each capped by the budget, but the first launch and MIN_REPETITIONS run however
        slow the kernel, each with a check behind it (`per_launch_s`: the case's
        validation wall time)."""
        return kernel_timeout_s + 2.0 * self.max_total_ms / 1e3 \
            + (1 + self.min_repetitions + self.repetitions) * per_launch_s


def screen_timing(full: TimingConfig) -> TimingConfig:
    """The first chunk's recipe: the full one's L2 policy and budget, fewer launches."""
    return TimingConfig(warmup=SCREEN_WARMUP, repetitions=SCREEN_LAUNCHES, cold_l2=full.cold_l2,
                        max_total_ms=full.max_total_ms, min_repetitions=full.min_repetitions,
                        warmup_share=full.warmup_share)


def lower_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """The largest k (at least 1) with P(Binomial(n, 1/2) < k) <= confidence: the k-th
    fastest of n exchangeable launches is then at or below their median but for that
    chance. 1 up to n = 13 (the fastest), 3 for 20, 7 for 30. Under 10 launches (a chunk a
    slow kernel's time cap cut short) no rank reaches the confidence: the fastest, as before."""
    k, below = 1, 0.0  # below: P(Binomial(n, 1/2) < k + 1) as k grows
    for j in range(n):
        below += math.comb(n, j) / 2.0 ** n
        if below > confidence:
            break
        k = j + 1
    return max(1, min(k, n))


def low(samples: Sequence[float]) -> float:
    """The lower bound on the median of `samples`: their lower_rank-th fastest."""
    return sorted(samples)[lower_rank(len(samples)) - 1]
