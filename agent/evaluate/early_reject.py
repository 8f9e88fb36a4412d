"""Early rejection: a candidate that is clearly slower than the best stops timing after
a first chunk of launches (DESIGN.md, Evaluation 5).

The rule, over the first chunk of SCREEN.repetitions cold launches per performance
case (after SCREEN.warmup warm-up launches), where low(s) is the k-th fastest of a
case's n launches, k = lower_rank(n) (of 11, the fastest; of 20, the 3rd):

    bound = geomean over the performance cases of low(chunk)
    reject when bound > best score x (1 + MARGIN)
           and, for every performance case, low(chunk) > that case's fastest
               median so far (the dispatch's winner) x (1 + MARGIN)

The second clause is there because a session's result may be a dispatch, a variant per
shape (agent/evaluate/dispatch.py): a split-K kernel three times slower on the square
cases and twice as fast on the long-K one is slower than the best by its geomean, and
is still the variant that case wants. Judged by the geomean alone, every split-K attempt
of a 40-attempt sgemm bench on an H200 is rejected early, and the long-K case stays at
0.06x cuBLAS. A case with no winner yet keeps any candidate timed in full.

Why it is safe. A candidate's score is the geometric mean of its cases' medians. For n
launches whose times are exchangeable, the k-th fastest lies above the median only when
fewer than k of the n land below it: P(Binomial(n, 1/2) < k), which lower_rank keeps at
or under CONFIDENCE (0.1%; for 11 launches and k = 1, 0.05%). So, per case, low(chunk)
is at or below the median the full timing would give, and the geomean of the lows is a
lower bound on the score (over C cases, but for at most C times that chance: 0.3% for
sgemm's six, before the margin). A candidate whose lower bound is slower than the best by
MARGIN could not become the best: the selection already refuses any score at or above
the best's (agent/evaluate/selection.py); the same bound per case means it could not
become that case's winner either (update_winners takes a case's median only below the
winner's). MARGIN (5%) is not needed for the statistics within one run; it is room for
what exchangeability does not cover: the screen is a run of its own (3 warm-up launches,
often before the validation), the full timing another (10), and the best's median was
measured minutes earlier. It is fifty times the run-to-run noise of a median on the H200
(CV ~0.1%, benchmarks/harness.py) and the clocks stay at their top throughout (NVML, read
around every timed case). That room is checked, not assumed: a kept candidate's screen
samples are archived beside its full timing (samples.json's `screen`), and
benchmarks/early_reject_safety.py reports the worst ratio of a screen's bound to the
later full median of the same case, which must stay under 1 + MARGIN. A noisy candidate
is kept: its spread pulls the k-th fastest down, so it gets the full budget and, when it
is close, the selection's interleaved re-timing. A sample that is not a finite positive
number keeps the candidate.

Why 11 launches and 5%. The worker is the search's bottleneck, and 3 attempts in 4 end
at the screen, so every launch the screen saves is GPU time for the search: 11 launches
instead of 20 save about 6 s in a 60 s search. On five recorded sgemm searches on an
H100, the first 11 launches' fastest rejects every one of the 661 candidates that 20
launches judged by their 3rd fastest reject, cuts none of the 17 screened winners, and
over the 163 kept screens its worst bound over the later full median is 1.025, under
1 + MARGIN. The margin is not smaller because the binomial bound says nothing across
runs; a larger one (10%) has candidates 5-10% slower than the best validated on every
case and timed in full for nothing.

Where it runs: before the validation (Evaluator.validate, told the best). A candidate the
chunk rejects is never validated: it can never be accepted, so its validation (every
case, the probes) would be GPU time spent on a verdict that changes nothing. The
chunk is judged like any timing (each timed launch's outputs against the reference, the
guard bands and inputs after it, the sweep after the request), so a kernel wrong in it
is wrong_answer, not rejected. A candidate it keeps is validated, then timed in full.

Whether the rule would ever have cut a winner is replayed over recorded sessions by
benchmarks/early_reject_safety.py (each attempt's samples: attempts/NNN/samples.json).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ..spec.timing_policy import MARGIN, SCREEN_LAUNCHES, low, lower_rank
from .stats import geomean


def _ordinal(k: int) -> str:
    return "" if k == 1 else f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


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
    if best_ms is None or best_ms <= 0 or not firsts or \
            any(not s or not all(math.isfinite(x) and x > 0 for x in s) for s in firsts.values()):
        return EarlyVerdict(False, None, "no best to compare with" if best_ms is None else
                            "a case has no samples, or one that is not a time")
    lows = {case: low(s) for case, s in firsts.items()}
    counts = "/".join(str(n) for n in sorted({len(s) for s in firsts.values()}))
    which = "/".join(f"{_ordinal(k)} fastest".strip() for k in sorted({lower_rank(len(s)) for s in firsts.values()}))
    bound = geomean(list(lows.values()))
    ratio = bound / best_ms
    if not ratio > 1.0 + margin:  # (a NaN anywhere keeps the candidate: nothing is cut on a number that is not one)
        return EarlyVerdict(False, bound, f"within {margin:.0%} of the best ({ratio:.3f}x): timed in full")
    if case_best_ms is not None:
        for case, bound_case in lows.items():
            winner = case_best_ms.get(case)
            if winner is None or not 0 < winner < math.inf or not bound_case > winner * (1.0 + margin):
                near = "no winner yet" if winner is None or not 0 < winner < math.inf else \
                    f"{bound_case / winner:.3f}x its fastest median {winner:.4f} ms"
                return EarlyVerdict(False, bound, f"{ratio:.2f}x the best, but within {margin:.0%} on case "
                                                  f"{case!r} ({near}): timed in full, a variant for that case")
    per_case = " and slower than every case's winner" if case_best_ms is not None else ""
    return EarlyVerdict(True, bound, f"rejected early: the {which} of its first {counts} launches per case "
                                     f"give {bound:.4f} ms (geomean), {ratio:.2f}x the best's {best_ms:.4f} ms, "
                                     f"more than {margin:.0%} slower{per_case}; timing stopped")


def screen_slack(pairs: Sequence[tuple[Mapping[str, Sequence[float]], Mapping[str, Sequence[float]]]]
                 ) -> tuple[int, float]:
    """(cases compared, worst ratio) of a kept candidate's screen bound, low(screen), to the
    median of its later full timing of the same case, over (screen, full) sample pairs. Above
    1 + MARGIN the rule could cut a candidate whose full median equals the best's. A screen
    archived with more launches than the chunk has (records of a 20-launch screen) is judged
    on its first SCREEN_LAUNCHES, as the rule judges a screen."""
    ratios = [low(s[:SCREEN_LAUNCHES]) / statistics.median(full[case]) for screen_, full in pairs
              for case, s in screen_.items() if _times(s) and _times(full.get(case))]
    return len(ratios), max(ratios, default=0.0)


def _times(samples: Optional[Sequence[object]]) -> bool:
    """Samples that are all finite positive times (a NaN comes back from samples.json as null)."""
    return bool(samples) and all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in samples or ())


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
