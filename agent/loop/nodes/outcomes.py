"""What the checkpoint keeps of an evaluation's cases (each case's status, median and place
against its speed-of-light floor), the bests a candidate is compared with, and the job an
attempt is evaluated as.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ...evaluate.attempt import AttemptJob
from ...evaluate.dispatch import CaseWinner
from ...evaluate.records import Best, CaseOutcome
from ...evaluate.results import EvaluationResult
from ...spec.candidate import Candidate
from ...spec.speed_of_light import Ceilings, case_floor
from ...spec.workload_model import Workload
from ..context import LoopContext
from ..state import LoopState


def outcomes(result: EvaluationResult, workload: Workload, ceilings: Optional[Ceilings]) -> list[CaseOutcome]:
    out = []
    for c in result.cases:
        floor = (case_floor(workload, workload.case(c.case), ceilings, c.timing.median_ms)
                 if ceilings and c.timing else None)
        out.append(CaseOutcome(case=c.case, role=c.role, status=c.status,
                               max_rel_error=c.check.max_rel_error if c.check else None,
                               median_ms=c.timing.median_ms if c.timing else None,
                               cv=c.timing.cv if c.timing else None,
                               pct_of_floor=floor.pct_of_floor if floor else None,
                               suspect=bool(floor and floor.suspect), clocks_mhz=list(c.clocks_mhz)))
    return out


def medians(cases: list[CaseOutcome]) -> dict[str, float]:
    return {c.case: c.median_ms for c in cases if c.role == "performance" and c.median_ms}


def bests(state: LoopState) -> tuple[Optional[float], Optional[dict[str, float]]]:
    """What early rejection compares a candidate with (and samples.json records, with
    --no-early-reject too, for the safety replay): the best score and each case's winner
    (none recorded, e.g. a checkpoint from before winners: the geomean rule alone, not
    "every case unwon")."""
    return bests_of(state.get("best"), state.get("winners", {}))


def bests_of(best: Optional[Best], winners: Mapping[str, CaseWinner]) -> tuple[Optional[float], Optional[dict[str, float]]]:
    """bests() of a best and the per-case winners."""
    case_best = {case: w.median_ms for case, w in winners.items()} or None
    return (best.score_ms if best else None), case_best


def attempt_job(ctx: LoopContext, state: LoopState, candidate: Candidate, iteration: int) -> AttemptJob:
    """Attempt `iteration`'s job, whether the evaluate node runs it or a step submits it
    ahead: told the bests unless --no-early-reject."""
    best_ms, case_best = bests(state)
    return AttemptJob(candidate, best_ms=best_ms if ctx.early_reject else None, case_best_ms=case_best, key=iteration)
