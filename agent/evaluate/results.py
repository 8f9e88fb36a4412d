"""What an evaluation says: per case and for the candidate as a whole.

Expected failures are typed statuses, not exceptions: they flow back to the
proposer as data. Statuses, roughly in the order they are met:

- ``compile_failed``: NVRTC rejected the source (the log is the detail);
- ``launch_invalid``: the launch rule gave an impossible configuration, or the
  driver refused it (too many threads, registers or shared memory);
- ``crashed``: the kernel faulted (e.g. CUDA_ERROR_ILLEGAL_ADDRESS); the worker
  was restarted;
- ``timeout``: the kernel ran past the deadline; the worker was killed;
- ``out_of_bounds``: it wrote into a guard band around a buffer;
- ``input_modified``: it changed an input (this case's or, found by the sweep
  after the candidate, any resident case's);
- ``reference_modified``: the reference on the GPU changed: a write far outside
  the kernel's buffers;
- ``wrong_answer``: outputs outside the tolerance, or never written;
- ``unstable``: right at first, wrong in a timed launch or after the timing loop;
- ``below_floor``: a median faster than the speed-of-light floor, a timing or
  validation hole, never a result;
- ``rejected_early``: its first timed launches were clearly slower than the best
  (agent/evaluate/early_reject.py): timing stopped, the partial samples kept. Never
  accepted; each of those launches' outputs was checked, but a candidate screened
  before validation had no correctness case run (its detail says so): slow, not
  known to be correct;
- ``ok``.

They are the members of ``Status`` (a ``StrEnum``: each member is its text); a case
or a candidate not judged yet is ``Progress.PENDING``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..runtime.compiler import CompiledKernel
from ..spec.launch import Launch
from ..worker.protocol import CaseCheck
from ..worker.status import FAILURES, Progress, Status
from .stats import TimingStats

__all__ = ["FAILURES", "Progress", "Status", "CaseResult", "EvaluationResult"]


@dataclass
class CaseResult:
    """One case of one evaluation as the evaluator builds it, reply by reply from the
    worker: the launch, each check (``CaseCheck``, the worker's verdict on one launch),
    every timing sample. Mutable while the worker answers; the session keeps its compact
    ``CaseOutcome`` (agent/evaluate/records.py) instead."""

    case: str
    role: str
    status: Status | Progress = Progress.PENDING
    launch: Optional[Launch] = None
    check: Optional[CaseCheck] = None
    recheck: Optional[CaseCheck] = None  # after timing
    timing: Optional[TimingStats] = None
    samples_ms: tuple[float, ...] = ()  # every timed sample (the first chunk's only, when rejected early)
    detail: str = ""
    validate_ms: float = 0.0
    time_ms: float = 0.0
    clocks_mhz: tuple[int, ...] = ()  # SM, memory before timing; SM, memory after (NVML)


@dataclass
class EvaluationResult:
    candidate: str
    status: Status | Progress
    compiled: Optional[CompiledKernel]
    cases: list[CaseResult] = field(default_factory=list)
    score_ms: Optional[float] = None  # geomean of performance medians
    detail: str = ""  # the first failure, verbatim, for the proposer
    seed: int = 0
    # compile / validate / time / total (the evaluator's own); call: the whole call as the Ray driver waited for it
    wall_ms: dict[str, float] = field(default_factory=dict)
    began_s: Optional[float] = None  # when the evaluator began it, epoch seconds (benchmarks/search_speed.py)
    gpu: str = ""  # where it ran: "0: NVIDIA H200 GPU-..." (the Ray backend: "actor 1: ...")
    # The early-rejection screen's samples per performance case, for a candidate it kept:
    # archived beside the full timing's, so the rule's bound can be checked against the
    # medians of later, separate runs (benchmarks/early_reject_safety.py)
    screen_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def case(self, name: str) -> CaseResult:
        return next(c for c in self.cases if c.case == name)
