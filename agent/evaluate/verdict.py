"""From an attempt's case results to its verdict: the overall status and score, whether it
covers enough cases to be judged, whether it could still be chosen (a contender), and the
speed-of-light gate on its medians.
"""

from __future__ import annotations

import time
from typing import Mapping, Optional

from ..spec.applicability import coverage_gap
from ..spec.speed_of_light import Ceilings, case_floor
from ..spec.workload_model import Workload
from .results import CaseResult, EvaluationResult, Progress, Status
from .stats import geomean

NOT_REVALIDATED = ("not revalidated after its timing: slower than the best and than every case's fastest median, "
                   "it could not be chosen (validated before the timing, every timed launch checked)")


def contender(result: EvaluationResult, best_ms: float, case_best_ms: Mapping[str, float]) -> bool:
    """Whether a timed result could be chosen: its score (the geomean of its performance
    medians) below the best's, or some case's median below that case's fastest so far
    (a case nobody has won yet counts as beaten)."""
    medians = performance_medians(result)
    if medians is None:
        return True  # not every performance case timed: nothing to compare, revalidate
    return geomean(list(medians.values())) < best_ms or \
        any(ms < case_best_ms.get(case, float("inf")) for case, ms in medians.items())


def performance_medians(result: EvaluationResult) -> Optional[dict[str, float]]:
    """Each performance case's median, once every one it applies to is timed."""
    medians = {c.case: c.timing.median_ms for c in result.cases if c.role == "performance" and c.timing}
    applies = sum(c.role == "performance" and c.status != Status.NOT_APPLICABLE for c in result.cases)
    if not medians or len(medians) < applies:
        return None
    return medians


def passed(c: CaseResult) -> bool:
    """A case that passed, or one the candidate does not apply to (never run, never failed)."""
    return c.status in (Status.OK, Status.NOT_APPLICABLE)


def screen_best(result: EvaluationResult, best_ms: float,
                 case_best_ms: Optional[Mapping[str, float]]) -> Optional[float]:
    """What the screen's geomean rule compares with. A candidate that does not apply to
    every performance case has no score comparable with the best's: its geomean is
    compared with that of the winners of the cases it does apply to (None, keep timing,
    where one of them has no winner), and the per-case rule decides as for any other."""
    if full_coverage(result):
        return best_ms
    cases = [c.case for c in result.cases if c.role == "performance" and c.status != Status.NOT_APPLICABLE]
    if case_best_ms is None or not cases or any(c not in case_best_ms for c in cases):
        return None
    return geomean([case_best_ms[c] for c in cases])


def coverage_problem(cases: list[CaseResult]) -> str:
    """Why a candidate that is not applicable to some cases cannot be judged at all, or ''
    (agent/spec/applicability.py's coverage_gap)."""
    skipped = [c for c in cases if c.status == Status.NOT_APPLICABLE]
    gap = coverage_gap(c.role for c in cases if c.status != Status.NOT_APPLICABLE) if skipped else None
    return f"{gap}; e.g. {skipped[0].detail}" if gap else ""


def full_coverage(result: EvaluationResult) -> bool:
    """Whether the candidate applies to every performance case (so it has a score)."""
    return not any(c.role == "performance" and c.status == Status.NOT_APPLICABLE for c in result.cases)


def finish(result: EvaluationResult, t_start: float) -> EvaluationResult:
    """Overall status (the first failing case's), detail and score."""
    if result.status == Progress.PENDING:
        failed = [c for c in result.cases if c.status not in (Status.OK, Status.NOT_APPLICABLE)]
        if failed:
            result.status = failed[0].status if failed[0].status != Progress.PENDING else Status.CRASHED
            result.detail = f"case '{failed[0].case}': {failed[0].detail}"
        else:
            result.status = Status.OK
    medians = performance_medians(result)
    if result.status == Status.OK and medians is not None and full_coverage(result):
        result.score_ms = geomean(list(medians.values()))
    result.wall_ms["validate"] = sum(c.validate_ms for c in result.cases)
    result.wall_ms["time"] = sum(c.time_ms for c in result.cases)
    result.wall_ms["total"] = (time.perf_counter() - t_start) * 1e3
    result.began_s = time.time() - result.wall_ms["total"] / 1e3
    return result


def gate_floor(result: EvaluationResult, workload: Workload, ceilings: Optional[Ceilings]) -> None:
    """A median faster than the speed-of-light floor is a hole in the harness, not a
    result: the case fails as ``below_floor``. Cold timing only (a hot L2 can beat
    the DRAM floor honestly: the caller passes no `ceilings` then); workloads without
    [metrics] have no floor."""
    if ceilings is None:
        return
    for c in result.cases:
        if c.status != Status.OK or c.timing is None:
            continue
        floor = case_floor(workload, workload.case(c.case), ceilings, c.timing.median_ms)
        if floor is not None and floor.suspect:
            c.status = Status.BELOW_FLOOR
            c.detail = (f"median {c.timing.median_ms:.4f} ms is {floor.pct_of_floor:.0%} of the speed-of-light "
                        f"floor ({floor.floor_ms:.4f} ms, {floor.bound}-bound, {ceilings.source}): faster than "
                        "the hardware allows, so the timing or the validation was gamed; never a result")
