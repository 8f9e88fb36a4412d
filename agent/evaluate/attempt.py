"""An attempt, the unit of evaluation: one candidate from its compile to its verdict.

The loop hands a backend an `AttemptJob` and gets one `AttemptResult` back; every backend
(the local evaluator, Ray's actors, the scheduler that runs a step's jobs ahead of the
graph, the test double) runs the same job, start to end, in one call: compile and audit
the kernel once, screen it against the best when told one, validate every case, then,
when the validation passed, time the performance cases, revalidate and apply the
speed-of-light gate. Nothing outside the call holds half an attempt.

What the GPU side reports on the way (the compile outcome, a `CompiledKernel`, first; then
the worker's replies: `CaseChecked`, `CaseTimed`...) goes to the sink the caller passes
with the job, in order: the caller's own, so that several attempts in flight at once
(ahead of the graph, on several GPUs) never share one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from ..runtime.compiler import CompiledKernel
from ..spec.candidate import Candidate
from .results import EvaluationResult

EventSink = Callable[[object], None]  # what a backend streams to, from the thread that runs the call

DEFAULT_SEED = 1  # the loop's inputs; FRESH_SEED (evaluator.py) is a new best's second look


def ignore(event: object) -> None:
    """A sink for a caller that wants no progress."""


@dataclass(frozen=True)
class AttemptJob:
    """What an attempt needs, whichever backend runs it.

    `best_ms` (with `case_best_ms`, each performance case's fastest median so far) turns
    on early rejection (agent/evaluate/early_reject.py): a candidate clearly slower than
    the best stops after a first chunk of launches, before its validation. None times
    it in full.

    `compiled`: the kernel compiled and audited already (by the scheduler before it takes
    the GPU, by the Ray driver before it calls an actor), used as it is: an attempt
    compiles and audits once wherever it runs. None: the backend compiles it.

    `key`: the loop's number for the attempt (Attempt.iteration), under which a scheduler
    files a job submitted ahead and hands its result to the graph. `any_gpu`: a backend
    with several GPUs may run it on any free one (a scheduler's lane); otherwise it runs
    on the GPU the session's own calls use, so a sequential session's attempts and its
    re-timings are timed on one GPU."""

    candidate: Candidate
    seed: int = DEFAULT_SEED
    best_ms: Optional[float] = None
    case_best_ms: Optional[Mapping[str, float]] = None
    compiled: Optional[CompiledKernel] = None
    key: int = 0
    any_gpu: bool = False


@dataclass
class AttemptResult:
    """An attempt's outcome. `validated`: the validation's result, or the verdict that came
    before or instead of one (compile_failed, launch_invalid, rejected_early by the screen,
    a crash). `timed`: the timing's result (timed, revalidated, gated: the attempt's
    verdict and score), None when the validation did not pass. Each is finished on its
    own (status, wall times, when it began), so a front end can show how long each took."""

    validated: EvaluationResult
    timed: Optional[EvaluationResult] = None

    @property
    def compiled(self) -> Optional[CompiledKernel]:
        """The compile outcome (None only where an attempt never reached a compile: an actor that died)."""
        return self.validated.compiled

    @property
    def verdict(self) -> EvaluationResult:
        """The result that decides the attempt: the timing's, else the validation's."""
        return self.timed if self.timed is not None else self.validated
