"""Who is the best: a challenger replaces the best only when it is faster by more
than the measured noise, and only after passing on fresh inputs.

- score < 0.97 x best: a clear win;
- 0.97 x best <= score < best: close; both are re-timed, interleaved
  (best, challenger, best, challenger), and the challenger wins only if its
  median re-timed score is below 0.995 x the best's (measured repeat CV of a
  median is ~0.1% on the H200, benchmarks/harness.py);
- a winner must then validate on inputs from another seed (FRESH_SEED).

FRESH_SEED is a constant: the fresh inputs and their references are the same in every
session. A refusal on them says which case and output failed, how many elements and where,
never a value (``fresh_detail``): quoting the expected values would let a model learn the
fresh references attempt by attempt and replay them from a kernel that recognises the case.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

from ..spec.candidate import Candidate
from ..spec.timing_policy import CLEAR_WIN, CONFIRM, ROUNDS
from .attempt import EventSink, ignore
from .backend import EvaluationBackend
from .evaluator import FRESH_SEED
from .results import EvaluationResult, Progress, Status


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    note: str
    status: Status | Progress = Status.OK  # the failure on fresh inputs (e.g. wrong_answer) when refused
    detail: str = ""


def challenge(evaluator: EvaluationBackend, challenger: Candidate, score_ms: float, best: Optional[Candidate],
              best_score_ms: Optional[float], on_event: EventSink = ignore) -> Verdict:
    """Whether `challenger` (timed at `score_ms`) replaces the best, by the rules above; the
    re-timings and the fresh-seed validation stream their progress to `on_event`."""
    if best is not None and best_score_ms is not None:
        ratio = score_ms / best_score_ms
        if ratio >= 1.0:
            return Verdict(False, f"{ratio:.3f}x the best's time")
        if ratio >= CLEAR_WIN:
            mine, theirs = [], []
            for _ in range(ROUNDS):  # timing only: both passed validation already
                theirs.append(evaluator.evaluate(best, revalidate=False, validate=False, on_event=on_event).score_ms)
                mine.append(evaluator.evaluate(challenger, revalidate=False, validate=False, on_event=on_event).score_ms)
            mine_ms, theirs_ms = [s for s in mine if s is not None], [s for s in theirs if s is not None]
            if len(mine_ms) < ROUNDS or len(theirs_ms) < ROUNDS:
                return Verdict(False, "re-timing failed")
            m, t = statistics.median(mine_ms), statistics.median(theirs_ms)
            if m >= CONFIRM * t:
                return Verdict(False, f"within noise on re-timing ({m:.4f} vs {t:.4f} ms)")
    fresh = evaluator.evaluate(challenger, seed=FRESH_SEED, time_cases=False, revalidate=False, on_event=on_event)
    if not fresh.ok:
        return Verdict(False, f"failed on fresh inputs (seed {FRESH_SEED})", fresh.status,
                       f"passed on seed 1 but not on fresh inputs (seed {FRESH_SEED}): {fresh_detail(fresh)}")
    return Verdict(True, "new best")


def fresh_detail(result: EvaluationResult) -> str:
    """The first failure on the fresh inputs without any value of theirs: for a wrong output,
    its counts, the pattern and the indices of the first wrong elements (not the values got
    or expected, not the largest errors, which would give the references away)."""
    failed = [c for c in result.cases if c.status not in (Status.OK, Status.NOT_APPLICABLE)]
    if not failed:
        return result.detail  # compile or launch refusals: the same source as on seed 1, no data in them
    c = failed[0]
    reports = c.check.reports if c.check is not None else ()
    if reports:
        lines = []
        for r in reports:
            total = 1
            for n in r.shape:
                total *= n
            lines += [f"output {r.output} {list(r.shape)}: {r.mismatches} of {total} elements outside rtol "
                      f"{r.rtol:.3g} (values withheld: the fresh inputs' references are not shown)",
                      f"pattern: {r.hint}"]
            if r.first:
                lines.append("first wrong at " + ", ".join(f"{r.output}{list(idx)}" for idx, _, _ in r.first))
        return f"case '{c.case}': " + "\n".join(lines)
    if c.status in (Status.WRONG_ANSWER, Status.UNSTABLE):
        return f"case '{c.case}': {c.status} (values withheld: the fresh inputs' references are not shown)"
    return f"case '{c.case}': {c.detail}"  # a guard band, an input modified, a crash: names, no values
