"""What the loop, the session, the proposers and the CLI ask of an evaluator: the
local one (agent/evaluate/evaluator.py, a GPU worker process), a test double
(tests/evaluator_double.py), one actor per GPU (agent/evaluate/ray_backend.py), and the
scheduler that runs a step's attempts ahead of the graph (agent/evaluate/ahead.py).
Everything above evaluate/ names this, never a concrete evaluator.

A call that reaches the GPU streams its progress to the sink passed with it (the compile
outcome, then the worker's replies), from the thread that made the call or, for an
attempt run ahead, replayed in order when its result is taken; a backend keeps no sink
of its own for the callers to swap.
"""

from __future__ import annotations

from typing import Optional, Protocol

from ..runtime.compiler import CompiledKernel
from ..runtime.device_facts import DeviceFacts
from ..spec.candidate import Candidate
from ..spec.speed_of_light import Ceilings
from ..worker.protocol import TimingConfig
from .attempt import DEFAULT_SEED, AttemptJob, AttemptResult, EventSink, ignore
from .results import EvaluationResult


class EvaluationBackend(Protocol):
    timing: TimingConfig

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

    def run_attempt(self, job: AttemptJob, on_event: EventSink = ignore) -> AttemptResult:
        """The loop's attempt, candidate to verdict (agent/evaluate/attempt.py): compile and
        audit once, the early-rejection screen when the job carries the best, validate,
        then time, revalidate and gate when the validation passed. Failures are statuses,
        not exceptions."""
        ...

    def evaluate(self, candidate: Candidate, seed: int = DEFAULT_SEED, revalidate: bool = True,
                 time_cases: bool = True, validate: bool = True, on_event: EventSink = ignore) -> EvaluationResult:
        """The whole recipe in one request, outside any attempt (the starting kernel, a
        challenge's re-timings and fresh-seed validation, the dispatch, `eval`, `bench`).
        `validate=False`: time the performance cases only (a kernel validated already)."""
        ...

    def evaluate_many(self, candidates: list[Candidate], seed: int = DEFAULT_SEED) -> list[EvaluationResult]:
        """evaluate() for each, results in the candidates' order: one after another on one
        GPU, spread over the free GPUs on Ray."""
        ...

    def baseline_kinds(self) -> list[str]:
        """The library baselines this workload has and this machine can run."""
        ...

    def baseline(self, seed: int = DEFAULT_SEED, kind: Optional[str] = None,
                 on_event: EventSink = ignore) -> Optional[EvaluationResult]:
        """A library on the same cases, timed the same way; None if there is none to run."""
        ...

    def abort(self) -> None:
        """Kill the GPU work in flight, from any thread ("stop now")."""
        ...

    def close(self) -> None:
        """Release the GPU side."""
        ...


class ParallelBackend(EvaluationBackend, Protocol):
    """A backend with several GPUs (Ray, one actor each): `lanes` attempts at once, from as
    many threads; a job marked `any_gpu` runs on a free GPU other than the one the
    session's own calls (re-timings, fresh-seed validations, baselines) stay on."""

    @property
    def lanes(self) -> int:
        """How many attempts may run at once: one per GPU."""
        ...


def parallel(backend: EvaluationBackend) -> Optional[ParallelBackend]:
    """The backend as a ParallelBackend when it has more than one GPU to run attempts on."""
    lanes = getattr(backend, "lanes", 1)
    return backend if isinstance(lanes, int) and lanes > 1 else None  # type: ignore[return-value]
