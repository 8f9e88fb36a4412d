"""The worker's replies folded into an EvaluationResult: a check on a case (validation,
a timed launch, the revalidation, the sweep of resident data), a case's timing, or a
failure marked on a case and on the attempt.
"""

from __future__ import annotations

from ..worker.protocol import CaseChecked, CaseTimed
from .deadlines import Deadlines
from .results import EvaluationResult, Progress, Status
from .stats import TimingStats


def fold_check(result: EvaluationResult, reply: CaseChecked, deadlines: Deadlines) -> None:
    """One check's status on its case: a validation sets it; a later check can only make a
    case that passed fail (``unstable`` where it was correct, then wrong)."""
    if not any(c.case == reply.case for c in result.cases):  # the sweep found another case's data changed
        mark(result, reply.case, reply.check.status, reply.check.detail)
        return
    c = result.case(reply.case)
    if reply.phase == "validate":
        c.check, c.validate_ms = reply.check, reply.elapsed_ms
        deadlines.validated(reply.case, reply.elapsed_ms)
        c.status = reply.check.status
        c.detail = c.detail or reply.check.detail
        return
    if reply.phase == "revalidate":
        c.recheck = reply.check
    if reply.check.status != Status.OK and c.status == Progress.PENDING:
        # Timed before any validation (the screen): the first check it met. Wrong in a
        # timed launch is a wrong answer here, not "unstable" (correct, then wrong).
        wrong = reply.check.status == Status.UNSTABLE
        c.status = Status.WRONG_ANSWER if wrong else reply.check.status
        c.detail = ("wrong in the screen's timed launches, before any validation: " if wrong else "") \
            + reply.check.detail
        return
    if reply.check.status == Status.OK or c.status != Status.OK:
        return
    # After the validation passed: wrong after the timing loop, in a timed launch, or found by the sweep.
    c.status = Status.UNSTABLE if reply.check.status == Status.WRONG_ANSWER else reply.check.status
    c.detail = reply.check.detail if reply.phase != "revalidate" else \
        "correct before the timing loop, wrong after it:\n" + reply.check.detail



def fold_timed(result: EvaluationResult, reply: CaseTimed) -> None:
    """A case's samples, its statistics and the clocks around them."""
    c = result.case(reply.case)
    c.timing, c.clocks_mhz = TimingStats.of(reply.samples_ms), reply.clocks_mhz
    c.time_ms += reply.elapsed_ms  # a first chunk and then the full timing both took time
    c.samples_ms = tuple(reply.samples_ms)


def mark(result: EvaluationResult, case: str, status: Status, detail: str) -> None:
    """A failure on `case`, and the attempt's own status where it has none yet."""
    for c in result.cases:
        if c.case == case:
            c.status, c.detail = status, detail
    if result.status in (Progress.PENDING, Status.OK):
        result.status, result.detail = status, detail
