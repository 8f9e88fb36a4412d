"""Evaluation ahead of the loop: while the graph's thread reflects on one attempt, logs
it, checkpoints and proposes, the GPU already screens, validates and times the next
candidates of the step.

A step of the loop may propose a batch (--batch N). propose hands the batch's candidates
to `submit()`, and one background thread runs each candidate's attempt on the backend,
in the batch's order, except that a candidate whose kernel is compiled already goes
before one whose compile is still running (a kernel not compiled yet is compiled before
the GPU is taken): validate() (the early-rejection screen first, told the best), then
benchmark() when it passed. The graph's validate and benchmark nodes take those results
instead of asking the backend, so the GPU does not wait on the graph between the
candidates of a step. Without it, the graph's own share of an sgemm attempt on the H200
is about half of it (propose 386 ms, reflect 147 ms, validate 176 ms, benchmark 299 ms
per attempt, `benchmarks/search_speed.py`).

What stays the same: on one GPU every backend call, ahead or not, runs under one lock
and an attempt's two halves back to back, so the worker sees the same kind of requests
in the same pairs as without it; results are the backend's own; the per-case events of
an attempt evaluated ahead are replayed to the node that takes its result, in order.

Several GPUs (a ParallelBackend: Ray with one actor per GPU): one thread per GPU (the
backend's `lanes`) takes the next attempt not begun and runs it whole on a free GPU
(`attempt()`), so the step's candidates run side by side; the graph still takes their
results in the step's order. The graph's own calls (a challenge's re-timings, fresh-seed
validations) stay on one GPU, which the backend keeps for them while they wait.

What differs: an attempt evaluated ahead is screened against the best known when it
began, which may be slower than the best when the graph reaches it. A slower best
rejects less, never more, so nothing is cut that the loop without evaluation ahead would
have kept (agent/evaluate/early_reject.py's argument holds for any best at or above the
current one). The graph passes each new best on (`update_bests`).

Stops. stop_now aborts the backend: the attempt in flight ends with EvaluationAborted,
raised where the graph takes it, and the attempts not begun are dropped. A pause, a stop
at the step boundary, the budget's end: `cancel()` drops the attempts not begun; their
candidates stay in the checkpoint's queue and are evaluated when the session goes on
(the one in flight finishes, and is used then if it is the same candidate). So a pause
can leave the GPU busy for at most one attempt.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, TypeVar

from ..runtime.compiler import CompiledKernel, is_cached
from ..runtime.device_facts import DeviceFacts
from ..spec.candidate import Candidate
from ..spec.speed_of_light import Ceilings
from ..worker.protocol import TimingConfig
from .backend import EvaluationBackend, parallel
from .evaluator import DEFAULT_SEED  # the loop's seed: no other is evaluated ahead
from .results import EvaluationResult
from .worker_channel import EvaluationAborted

T = TypeVar("T")


@dataclass
class _Attempt:
    """One candidate's attempt run ahead: its two results and the events each streamed."""

    candidate: Candidate
    best_ms: Optional[float] = None
    case_best_ms: Optional[dict[str, float]] = None
    done: threading.Event = field(default_factory=threading.Event)
    validated: Optional[EvaluationResult] = None
    benchmarked: Optional[EvaluationResult] = None
    error: Optional[BaseException] = None
    validate_events: list[object] = field(default_factory=list)
    benchmark_events: list[object] = field(default_factory=list)


class AheadEvaluator(EvaluationBackend):
    """A backend that evaluates a step's submitted candidates ahead; any other call goes
    straight to the wrapped backend (one call at a time)."""

    def __init__(self, backend: EvaluationBackend):
        self.backend = backend
        self._parallel = parallel(backend)  # several GPUs: attempts side by side, each whole on one
        self.on_event: Callable[[object], None] = lambda event: None
        self._calls = threading.Lock()  # one backend call (or attempt, on one GPU) at a time
        self._state = threading.Condition()  # guards everything below
        self._queue: deque[_Attempt] = deque()  # submitted, not begun
        self._attempts: list[_Attempt] = []  # submitted and not yet taken by the graph
        self._bests: tuple[Optional[float], Optional[dict[str, float]]] = (None, None)
        self._taken: Optional[_Attempt] = None  # validate() took it: benchmark() continues it
        # The graph's own calls waiting for the backend: they go before the next attempt ahead
        # (a plain lock is not fair: the thread that releases it takes it again at once, and
        # the graph's re-timing of a near-best candidate would wait for the whole queue).
        self._urgent = 0
        self._aborts = 0  # abort() calls so far: a graph call waiting when one came does not start
        self._threads: list[threading.Thread] = []  # one per GPU
        self._closed = False
        # Read once (a backend's GPU does not change): the nodes read them between attempts,
        # and must not wait for the attempt in flight to do so.
        self._facts: Optional[DeviceFacts] = None
        self._ceilings: Optional[tuple[Optional[Ceilings]]] = None

    # -- ahead ----------------------------------------------------------------------
    def submit(self, candidates: list[Candidate], best_ms: Optional[float],
               case_best_ms: Optional[Mapping[str, float]] = None) -> None:
        """Evaluate these ahead, in order, screened against `best_ms` (None: no screen) or
        a newer best given to update_bests() before their attempt begins."""
        with self._state:
            self._bests = (best_ms, dict(case_best_ms) if case_best_ms is not None else None)
            for c in candidates:
                if not any(a.candidate == c for a in self._attempts):
                    attempt = _Attempt(c)
                    self._attempts.append(attempt)
                    self._queue.append(attempt)
            if not self._threads and not self._closed:
                lanes = self._parallel.lanes if self._parallel is not None else 1
                self._threads = [threading.Thread(target=self._work, daemon=True,
                                                  name="evaluate-ahead" + (f"-{i}" if i else ""))
                                 for i in range(lanes)]
                for thread in self._threads:
                    thread.start()
            self._state.notify_all()

    def update_bests(self, best_ms: Optional[float], case_best_ms: Optional[Mapping[str, float]] = None) -> None:
        """The best score and the case winners to screen the attempts not begun against."""
        with self._state:
            self._bests = (best_ms, dict(case_best_ms) if case_best_ms is not None else None)

    def cancel(self) -> None:
        """Drop the attempts not begun (a pause, a stop, the end of the budget)."""
        with self._state:
            for attempt in self._queue:
                self._attempts.remove(attempt)
            self._queue.clear()

    def _work(self) -> None:
        while True:
            with self._state:
                # On one GPU a call of the graph's goes first; several GPUs: the backend keeps one for it.
                while (not self._queue or (self._urgent and self._parallel is None)) and not self._closed:
                    self._state.wait()
                if self._closed:
                    return
                attempt, ready = self._next()
                attempt.best_ms, attempt.case_best_ms = self._bests
            try:
                if self._parallel is None and not ready:
                    # NVRTC (or the compile ahead in flight) before the GPU is taken: the graph's
                    # own calls are not held up by a compile.
                    self.backend.compile(attempt.candidate)
                if self._parallel is not None:
                    halves = self._parallel.attempt(attempt.candidate, DEFAULT_SEED, best_ms=attempt.best_ms,
                                                    case_best_ms=attempt.case_best_ms)
                    attempt.validate_events, attempt.benchmark_events = halves.validate_events, halves.benchmark_events
                    attempt.validated, attempt.benchmarked = halves.validated, halves.benchmarked
                else:
                    self._one_gpu(attempt)
            except BaseException as e:  # raised in the graph's thread, where the result is taken
                attempt.error = e
                if isinstance(e, EvaluationAborted):  # "stop now": nothing of this attempt is kept for a later run
                    with self._state:
                        if attempt in self._attempts:
                            self._attempts.remove(attempt)
                    self.cancel()
            finally:
                attempt.done.set()

    def _next(self) -> tuple[_Attempt, bool]:
        """Under `_state`: the first attempt not begun whose kernel is compiled already, else
        the first (and whether it is compiled). The GPU does not wait on NVRTC for one of the
        step's kernels while another is ready; the graph still takes the results in the
        step's order, each screened against the best known when its attempt began."""
        facts = self._facts  # read by the plan, before any step; None: nothing is known
        ready = next((a for a in self._queue if facts is not None and
                      is_cached(a.candidate.source, a.candidate.entry, facts.arch, a.candidate.compile_options())),
                     None)
        attempt = ready or self._queue[0]
        self._queue.remove(attempt)
        return attempt, ready is not None

    def _one_gpu(self, attempt: _Attempt) -> None:
        with self._calls:
            self.backend.on_event = attempt.validate_events.append
            attempt.validated = self.backend.validate(attempt.candidate, DEFAULT_SEED, best_ms=attempt.best_ms,
                                                      case_best_ms=attempt.case_best_ms)
            if attempt.validated.ok:
                self.backend.on_event = attempt.benchmark_events.append
                attempt.benchmarked = self.backend.benchmark(attempt.candidate, DEFAULT_SEED, best_ms=attempt.best_ms,
                                                             case_best_ms=attempt.case_best_ms)

    def _take(self, candidate: Candidate, seed: int) -> Optional[_Attempt]:
        if seed != DEFAULT_SEED:
            return None
        with self._state:
            attempt = next((a for a in self._attempts if a.candidate == candidate), None)
            if attempt is not None:
                self._attempts.remove(attempt)
                if attempt in self._queue:  # not begun: the graph asks for it now, so it runs now
                    self._queue.remove(attempt)
                    return None
            return attempt

    # -- the backend's calls ----------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        with self._state:
            self._urgent += 1
            aborts = self._aborts
        try:
            with self._calls:
                if self._aborts != aborts:  # "stop now" came while it waited: no new GPU work after it
                    raise EvaluationAborted("stopped by the user")
                self.backend.on_event = self.on_event
                return fn()
        finally:
            with self._state:
                self._urgent -= 1
                self._state.notify_all()

    def validate(self, candidate: Candidate, seed: int = DEFAULT_SEED, best_ms: Optional[float] = None,
                 case_best_ms: Optional[Mapping[str, float]] = None) -> EvaluationResult:
        attempt = self._take(candidate, seed)
        self._taken = None
        if attempt is None:
            return self._call(lambda: self.backend.validate(candidate, seed, best_ms=best_ms, case_best_ms=case_best_ms))
        attempt.done.wait()
        for event in attempt.validate_events:
            self.on_event(event)
        if attempt.error is not None:
            raise attempt.error
        assert attempt.validated is not None
        self._taken = attempt
        return attempt.validated

    def benchmark(self, candidate: Candidate, seed: int = DEFAULT_SEED, best_ms: Optional[float] = None,
                  case_best_ms: Optional[Mapping[str, float]] = None) -> EvaluationResult:
        attempt, self._taken = self._taken, None
        if attempt is not None and attempt.candidate == candidate and attempt.benchmarked is not None:
            for event in attempt.benchmark_events:
                self.on_event(event)
            return attempt.benchmarked
        return self._call(lambda: self.backend.benchmark(candidate, seed, best_ms=best_ms, case_best_ms=case_best_ms))

    def evaluate(self, candidate: Candidate, seed: int = DEFAULT_SEED, revalidate: bool = True,
                 time_cases: bool = True, validate: bool = True) -> EvaluationResult:
        return self._call(lambda: self.backend.evaluate(candidate, seed, revalidate, time_cases, validate))

    def evaluate_many(self, candidates: list[Candidate], seed: int = DEFAULT_SEED) -> list[EvaluationResult]:
        return self._call(lambda: self.backend.evaluate_many(candidates, seed))

    def compile(self, candidate: Candidate) -> CompiledKernel:
        # Not under the lock: compiles are host work (the compile pool and its cache are
        # thread-safe), and the compile node must not wait for the GPU's attempt in flight.
        return self.backend.compile(candidate)

    def baseline(self, seed: int = DEFAULT_SEED, kind: Optional[str] = None) -> Optional[EvaluationResult]:
        return self._call(lambda: self.backend.baseline(seed, kind))

    def baseline_kinds(self) -> list[str]:
        return self.backend.baseline_kinds()

    @property
    def timing(self) -> TimingConfig:  # type: ignore[override]
        return self.backend.timing

    @property
    def facts(self) -> DeviceFacts:
        if self._facts is None:
            self._facts = self._call(lambda: self.backend.facts)
        return self._facts

    @property
    def ceilings(self) -> Optional[Ceilings]:
        if self._ceilings is None:
            self._ceilings = (self._call(lambda: self.backend.ceilings),)
        return self._ceilings[0]

    def __getattr__(self, name: str) -> Any:
        # What a concrete backend offers beyond the protocol (e.g. reference_timeout_s), read-only.
        if name == "backend":
            raise AttributeError(name)
        return getattr(self.backend, name)

    def abort(self) -> None:
        """From any thread: drop the attempts not begun and kill the GPU work in flight (a
        call of the graph's waiting for it is not started)."""
        with self._state:
            self._aborts += 1
        self.cancel()
        self.backend.abort()

    def close(self) -> None:
        """End the background threads (after the attempts in flight); the backend is the caller's to close."""
        with self._state:
            self._closed = True
            self._queue.clear()
            self._state.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join()
