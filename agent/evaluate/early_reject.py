"""Early rejection: a candidate that is clearly slower than the best stops timing after
a first chunk of launches (DESIGN.md, Evaluation 5).

The rule, over the first chunk of SCREEN.repetitions cold launches per performance
case (after SCREEN.warmup warm-up launches):

    bound = geomean over the performance cases of the chunk's minimum
    reject when bound > best score x (1 + MARGIN)
           and, for every performance case, its chunk minimum > that case's fastest
               median so far (the dispatch's winner) x (1 + MARGIN)

The second clause is there because a session's result may be a dispatch, a variant per
shape (agent/evaluate/dispatch.py): a split-K kernel three times slower on the square
cases and twice as fast on the long-K one is slower than the best by its geomean, and
is still the variant that case wants. Judged by the geomean alone it was cut on the
H200 (session 9: every split-K attempt of a 40-attempt sgemm bench was rejected early,
and the long-K case stayed at 0.06x cuBLAS). A case with no winner yet keeps any
candidate timed in full.

Why it is safe. A candidate's score is the geometric mean of its cases' medians. The
minimum of a chunk is, per case, at or below the median of the full timing unless all
of the chunk's launches land above that median (under exchangeable samples a chance
of 2^-10 for a chunk of 10, and then by less than the spread of the samples), so the
geomean of the minima is a lower bound on the score the full timing would give. A
candidate whose lower bound is slower than the best by MARGIN (10%) could not become
the best: the selection already refuses any score at or above the best's
(agent/evaluate/selection.py); the same bound per case means it could not become that
case's winner either (update_winners takes a case's median only below the winner's).
MARGIN is two orders of magnitude above the
run-to-run noise of a median measured on the H200 (CV ~0.1%, benchmarks/harness.py)
and several times the per-launch spread of a cold timing (a CV of a few percent).
A noisy candidate is kept: its spread pulls its minimum down, so it gets the full
budget and, when it is close, the selection's interleaved re-timing.

Where it runs: before the validation (Evaluator.validate, told the best). A candidate the
chunk rejects is never validated: it can never be accepted, so its validation (every
case, the exact probes) would be GPU time spent on a verdict that changes nothing. The
chunk is judged like any timing (each timed launch's outputs against the reference, the
guard bands and inputs after it, the sweep after the request), so a kernel wrong in it
is wrong_answer, not rejected. A candidate it keeps is validated, then timed in full.

Whether the rule would ever have cut a winner is replayed over recorded sessions by
benchmarks/early_reject_safety.py (each attempt's samples: attempts/NNN/samples.json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ..worker.protocol import TimingConfig
from .stats import geomean

MARGIN = 0.10
# The first chunk: a short warm-up (the L2 flush makes every launch cold anyway) and 10 launches.
SCREEN_WARMUP = 3
SCREEN_LAUNCHES = 10


def screen_timing(full: TimingConfig) -> TimingConfig:
    """The first chunk's recipe: the full one's L2 policy, fewer launches."""
    return TimingConfig(warmup=SCREEN_WARMUP, repetitions=SCREEN_LAUNCHES, cold_l2=full.cold_l2,
                        max_total_ms=full.max_total_ms)


@dataclass(frozen=True)
class EarlyVerdict:
    reject: bool
    bound_ms: Optional[float]  # geomean of the chunk minima: a lower bound on the score
    note: str


def screen(chunks: Mapping[str, Sequence[float]], best_ms: Optional[float], margin: float = MARGIN,
           launches: int = SCREEN_LAUNCHES, case_best_ms: Optional[Mapping[str, float]] = None) -> EarlyVerdict:
    """The verdict on the first `launches` samples of each performance case (`chunks`, by case)
    against the best score so far and, given `case_best_ms` (each case's fastest median so
    far), against every case's winner. No best, or a case without samples: keep timing."""
    firsts = {case: list(s)[:launches] for case, s in chunks.items()}
    if best_ms is None or best_ms <= 0 or not firsts or any(not s or min(s) <= 0 for s in firsts.values()):
        return EarlyVerdict(False, None, "no best to compare with" if best_ms is None else "a case has no samples")
    bound = geomean([min(s) for s in firsts.values()])
    ratio = bound / best_ms
    if not ratio > 1.0 + margin:  # (a NaN anywhere keeps the candidate: nothing is cut on a number that is not one)
        return EarlyVerdict(False, bound, f"within {margin:.0%} of the best ({ratio:.3f}x): timed in full")
    if case_best_ms is not None:
        for case, s in firsts.items():
            winner = case_best_ms.get(case)
            if winner is None or not 0 < winner < math.inf or not min(s) > winner * (1.0 + margin):
                near = "no winner yet" if winner is None or not 0 < winner < math.inf else \
                    f"{min(s) / winner:.3f}x its fastest median {winner:.4f} ms"
                return EarlyVerdict(False, bound, f"{ratio:.2f}x the best, but within {margin:.0%} on case "
                                                  f"{case!r} ({near}): timed in full, a variant for that case")
    per_case = " and slower than every case's winner" if case_best_ms is not None else ""
    return EarlyVerdict(True, bound, f"rejected early: its fastest of the first {launches} launches per case "
                                     f"give {bound:.4f} ms (geomean), {ratio:.2f}x the best's {best_ms:.4f} ms, "
                                     f"more than {margin:.0%} slower{per_case}; timing stopped")


@dataclass(frozen=True)
class Replay:
    """The rule replayed over recorded attempts: how many it would have cut, and how many
    of those were winners (a new best or a case's new winner when recorded): that number
    must be zero."""

    timed: int  # attempts with samples and a best to compare with
    cut: int
    winners: int  # new bests and new case winners among the timed
    winners_cut: int
    saved_launches: int  # measured launches the cut attempts would not have run

    def text(self) -> str:
        return (f"{self.timed} attempts timed against a best: the rule cuts {self.cut} "
                f"({self.saved_launches} launches saved); winners {self.winners}, winners cut {self.winners_cut}")


def replay(attempts: Sequence[tuple[Mapping[str, Sequence[float]], Optional[float], bool,
                                   Optional[Mapping[str, float]]]],
           margin: float = MARGIN) -> Replay:
    """`attempts`: (samples per timed case in launch order, the best score it was timed
    against, whether it became the new best or a case's winner, the case winners'
    medians it was timed against or None where not recorded) for each recorded attempt."""
    timed = cut = winners = winners_cut = saved = 0
    for cases, best_ms, new_best, case_best in attempts:
        if best_ms is None or not cases:
            continue
        timed += 1
        winners += new_best
        if screen(cases, best_ms, margin, case_best_ms=case_best).reject:
            cut += 1
            winners_cut += new_best
            saved += sum(max(0, len(s) - SCREEN_LAUNCHES) for s in cases.values())
    return Replay(timed, cut, winners, winners_cut, saved)
