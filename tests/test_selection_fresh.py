"""The fresh-inputs check of a new best (agent/evaluate/selection.py): what its refusal
tells the model. FRESH_SEED is a constant, so the fresh inputs, and their references, are
the same in every session; a refusal that quotes the references' values lets a model learn
them attempt by attempt and replay them from a kernel that recognises the case (by its
sizes and first input), which would then pass the very check meant to catch such a kernel."""

from __future__ import annotations

import numpy as np

from warpsmith.agent.evaluate.results import CaseResult, EvaluationResult, Status
from warpsmith.agent.evaluate.selection import challenge
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.launch import LaunchRule
from warpsmith.agent.worker.mismatch import build_report
from warpsmith.agent.worker.protocol import CaseCheck

# The fresh reference of a small correctness case, as a model would want to learn it.
REFERENCE = np.array([[0.7318421, -1.402917, 2.918273], [0.1123581, 5.551234, -3.141593]])


class FreshFailing:
    """Passes every seed but FRESH_SEED, where its output is all zeros."""

    def evaluate(self, candidate, seed=1, revalidate=True, time_cases=True, validate=True, on_event=None):
        if seed == 1:
            return EvaluationResult(candidate.name, Status.OK, None, score_ms=1.0)
        report = build_report("C", np.zeros_like(REFERENCE), REFERENCE, 1e-5)
        check = CaseCheck(Status.WRONG_ANSWER, report.max_abs_error, report.max_rel_error, report.mismatches,
                          report.text(), (report,))
        case = CaseResult("odd-2x3", "correctness", Status.WRONG_ANSWER, check=check, detail=report.text())
        return EvaluationResult(candidate.name, Status.WRONG_ANSWER, None, [case],
                                detail=f"case 'odd-2x3': {report.text()}", seed=seed)


def _candidate() -> Candidate:
    return Candidate("__global__ void k() {}", "k", LaunchRule.parse(["1"], ["1"]), name="challenger")


def test_a_fresh_input_refusal_quotes_no_reference_value():
    verdict = challenge(FreshFailing(), _candidate(), 1.0, None, None)
    assert not verdict.accepted and verdict.status == Status.WRONG_ANSWER
    assert "fresh inputs" in verdict.detail and "odd-2x3" in verdict.detail
    shown = verdict.detail + verdict.note
    for value in REFERENCE.flat:  # neither the expected values nor the errors that give them away
        for text in (f"{value:.7g}", f"{abs(value):.4g}", f"{value:.4g}"):
            assert text not in shown, (text, shown)


def test_a_fresh_input_refusal_still_says_where_the_output_is_wrong():
    """What a kernel author needs without the numbers: which output, how many, where."""
    verdict = challenge(FreshFailing(), _candidate(), 1.0, None, None)
    assert "6 of 6 elements" in verdict.detail and "every element is wrong" in verdict.detail
