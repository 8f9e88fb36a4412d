"""What the loop, the session, the proposers and the CLI ask of an evaluator: the
local one (agent/evaluate/evaluator.py, a GPU worker process), a test double
(tests/evaluator_double.py), one actor per GPU (agent/evaluate/ray_backend.py).
Everything above evaluate/ names this, never a concrete evaluator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Protocol

from ..runtime.compiler import CompiledKernel
from ..runtime.device_facts import DeviceFacts
from ..spec.candidate import Candidate
from ..spec.speed_of_light import Ceilings
from ..worker.protocol import TimingConfig
from .results import EvaluationResult


class EvaluationBackend(Protocol):
    timing: TimingConfig
    # Called with each reply of the GPU side as it arrives (CaseChecked, CaseTimed...), for live progress.
    on_event: Callable[[object], None]

    @property
    def facts(self) -> DeviceFacts:
        """The GPU's facts (starts the GPU side if it is not running)."""
        ...

    @property
    def ceilings(self) -> Optional[Ceilings]:
        """The GPU's measured ceilings, else datasheet leads, else None."""
        ...

    def compile(self, candidate: Candidate) -> CompiledKernel:
        """NVRTC and the CUBIN audit (host work, through the compile cache); safe from any thread."""
        ...

    def evaluate(self, candidate: Candidate, seed: int = 1, revalidate: bool = True,
                 time_cases: bool = True, validate: bool = True) -> EvaluationResult:
        """Compile, validate, time and validate again; failures are statuses, not exceptions.
        `validate=False`: time the performance cases only (a kernel validated already)."""
        ...

    def validate(self, candidate: Candidate, seed: int = 1, best_ms: Optional[float] = None,
                 case_best_ms: Optional[Mapping[str, float]] = None) -> EvaluationResult:
        """An attempt's first half: compile and validate every case, nothing timed. Given
        the best score so far, the early-rejection screen may come first: a candidate it
        rejects is ``rejected_early`` and never validated (it can never be accepted)."""
        ...

    def benchmark(self, candidate: Candidate, seed: int = 1, best_ms: Optional[float] = None,
                  case_best_ms: Optional[Mapping[str, float]] = None) -> EvaluationResult:
        """An attempt's second half: time and validate again. Given the best score so far
        (and each performance case's fastest median, the dispatch's winners), a candidate
        clearly slower than it (and than every case's winner) stops after a first chunk
        of launches, as ``rejected_early`` (agent/evaluate/early_reject.py)."""
        ...

    def evaluate_many(self, candidates: list[Candidate], seed: int = 1) -> list[EvaluationResult]:
        """evaluate() for each, results in the candidates' order: one after another on one
        GPU, spread over the free GPUs on Ray."""
        ...

    def baseline_kinds(self) -> list[str]:
        """The library baselines this workload has and this machine can run."""
        ...

    def baseline(self, seed: int = 1, kind: Optional[str] = None) -> Optional[EvaluationResult]:
        """A library on the same cases, timed the same way; None if there is none to run."""
        ...

    def abort(self) -> None:
        """Kill the GPU work in flight, from any thread ("stop now")."""
        ...

    def close(self) -> None:
        """Release the GPU side."""
        ...


@dataclass
class AttemptHalves:
    """An attempt run whole on one GPU (ParallelBackend.attempt): its two results, and the
    replies each half streamed, kept apart from any other attempt's (several run at once,
    so they cannot go through the backend's one on_event)."""

    validated: EvaluationResult
    benchmarked: Optional[EvaluationResult] = None  # None: the validation did not pass
    validate_events: list[object] = field(default_factory=list)
    benchmark_events: list[object] = field(default_factory=list)


class ParallelBackend(EvaluationBackend, Protocol):
    """A backend with several GPUs (Ray, one actor each): `lanes` attempts at once, each
    run by attempt() on a free GPU other than the one the session's own calls (re-timings,
    fresh-seed validations, baselines) stay on."""

    @property
    def lanes(self) -> int:
        """How many attempts may run at once: one per GPU."""
        ...

    def attempt(self, candidate: Candidate, seed: int = 1, best_ms: Optional[float] = None,
                case_best_ms: Optional[Mapping[str, float]] = None) -> AttemptHalves:
        """validate(), then benchmark() when it passed, on one GPU, safe from any thread."""
        ...


def parallel(backend: EvaluationBackend) -> Optional[ParallelBackend]:
    """The backend as a ParallelBackend when it has more than one GPU to run attempts on."""
    lanes = getattr(backend, "lanes", 1)
    return backend if isinstance(lanes, int) and lanes > 1 and hasattr(backend, "attempt") else None  # type: ignore[return-value]
