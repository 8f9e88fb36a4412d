"""Evaluation ahead of the loop: a scheduler of attempt jobs. While the graph's thread
reflects on one attempt, logs it, checkpoints and proposes, the GPU already runs the
next attempts of the step.

A step of the loop may propose a batch (--batch N). The propose node submits the batch
as jobs (AttemptJob, agent/evaluate/attempt.py), each filed under its attempt's number
(`key`), and background threads run them on the backend, whole, in the batch's order,
except that on one GPU a job whose kernel is compiled already goes before one whose
compile is still running (a kernel not compiled yet is compiled before the GPU is taken,
and its job carries it on). The graph's evaluate node asks for its attempt by key
(run_attempt): a job run ahead is waited for and the events it streamed are replayed to
the node's sink, in order; a job not begun yet is taken off the queue and run at once,
as is one never submitted. So the GPU does not wait on the graph between the candidates
of a step. Without it, the graph's own share of an sgemm attempt on the H200 was about
half of it (propose 386 ms and reflect 147 ms per attempt, against 475 ms of validation
and timing, `benchmarks/search_speed.py`).

A key names the session's attempt, and the job filed under it is that attempt's
candidate, unless the step was proposed again (a propose node run a second time after a
failure, the proposer answering otherwise): a job filed for another candidate is stale,
its result dropped, and the attempt runs at once. A second submit for a key replaces the
job filed under it.

What stays the same: on one GPU every backend call, ahead or not, runs under one lock, so
the worker sees one request at a time, and a call of the graph's (a challenge's
re-timing, a fresh-seed validation) goes before the next job; results are the backend's
own.

Several GPUs (a ParallelBackend: Ray with one actor per GPU): one thread per GPU (the
backend's `lanes`) takes the next job not begun and runs it, marked `any_gpu`, on a
free GPU, so the step's attempts run side by side; the graph still takes their results
in the step's order. The graph's own calls stay on one GPU, which the backend keeps for
them while they wait.

What differs: a job begins screened against the newest bests the scheduler was told (the
last submitted job's, or a later update_bests()), which may be slower than the best when
the graph reaches it. A slower best rejects less, never more, so nothing is cut that the
loop without evaluation ahead would have kept (agent/evaluate/early_reject.py's argument
holds for any best at or above the current one).

Stops. stop_now aborts the backend: the job in flight ends with EvaluationAborted, raised
where the graph takes its result, and the jobs not begun are dropped. A pause, a stop at
the step boundary, the budget's end: `cancel()` drops the jobs not begun; their
candidates stay in the checkpoint's queue and are evaluated when the session goes on
(the one in flight finishes, and is used then: its key and candidate are the same). So a
pause can leave the GPU busy for at most one attempt per GPU.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, TypeVar

from ..runtime.compiler import CompiledKernel, is_cached
from ..runtime.device_facts import DeviceFacts
from ..spec.candidate import Candidate
from ..spec.speed_of_light import Ceilings
from ..worker.protocol import TimingConfig
from .attempt import DEFAULT_SEED, AttemptJob, AttemptResult, EventSink, ignore
from .backend import EvaluationBackend, parallel
from .results import EvaluationResult
from .worker_channel import EvaluationAborted

T = TypeVar("T")


@dataclass(eq=False)  # one job, known by identity
class _Scheduled:
    """A job submitted ahead: its result (or the error it raised) once done, and the events it streamed."""

    job: AttemptJob
    done: threading.Event = field(default_factory=threading.Event)
    result: Optional[AttemptResult] = None
    error: Optional[BaseException] = None
    events: list[object] = field(default_factory=list)


class AttemptScheduler(EvaluationBackend):
    """Runs the jobs submitted to it ahead of the graph and hands each one's result to the
    graph by its key; any other call goes straight to the wrapped backend (one call at a
    time)."""

    def __init__(self, backend: EvaluationBackend):
        self.backend = backend
        self._parallel = parallel(backend)  # several GPUs: jobs side by side, each whole on one
        self._calls = threading.Lock()  # one backend call (or job, on one GPU) at a time
        self._state = threading.Condition()  # guards everything below
        self._queue: deque[_Scheduled] = deque()  # submitted, not begun
        self._jobs: dict[int, _Scheduled] = {}  # by key: submitted and not yet taken by the graph
        self._bests: tuple[Optional[float], Optional[dict[str, float]]] = (None, None)
        # The graph's own calls waiting for the backend: they go before the next job (a plain
        # lock is not fair: the thread that releases it takes it again at once, and the
        # graph's re-timing of a near-best candidate would wait for the whole queue).
        self._urgent = 0
        self._aborts = 0  # abort() calls so far: a graph call waiting when one came does not start
        self._threads: list[threading.Thread] = []  # one per GPU
        self._closed = False
        # Read once (a backend's GPU does not change): the nodes read them between attempts,
        # and must not wait for the attempt in flight to do so.
        self._facts: Optional[DeviceFacts] = None
        self._ceilings: Optional[tuple[Optional[Ceilings]]] = None

    # -- the jobs ahead ------------------------------------------------------------------
    def submit(self, jobs: list[AttemptJob]) -> None:
        """Run these ahead, in order, each filed under its key (replacing a job filed there)."""
        with self._state:
            for job in jobs:
                old = self._jobs.get(job.key)
                if old is not None and any(q is old for q in self._queue):
                    self._queue.remove(old)
                scheduled = _Scheduled(job)
                self._jobs[job.key] = scheduled
                self._queue.append(scheduled)
                self._bests = (job.best_ms, dict(job.case_best_ms) if job.case_best_ms is not None else None)
            if not self._threads and not self._closed:
                lanes = self._parallel.lanes if self._parallel is not None else 1
                self._threads = [threading.Thread(target=self._work, daemon=True,
                                                  name="evaluate-ahead" + (f"-{i}" if i else ""))
                                 for i in range(lanes)]
                for thread in self._threads:
                    thread.start()
            self._state.notify_all()

    def update_bests(self, best_ms: Optional[float], case_best_ms: Optional[Mapping[str, float]] = None) -> None:
        """The best score and the case winners to screen the jobs not begun against."""
        with self._state:
            self._bests = (best_ms, dict(case_best_ms) if case_best_ms is not None else None)

    def cancel(self) -> None:
        """Drop the jobs not begun (a pause, a stop, the end of the budget)."""
        with self._state:
            for scheduled in self._queue:
                if self._jobs.get(scheduled.job.key) is scheduled:
                    del self._jobs[scheduled.job.key]
            self._queue.clear()

    def run_attempt(self, job: AttemptJob, on_event: EventSink = ignore) -> AttemptResult:
        """The attempt filed under the job's key, run ahead: its result, waited for, the
        events it streamed replayed to `on_event` in order (an error it raised, raised
        here). Anything else runs now, in this thread: a job not begun, a stale one, one
        never submitted.

        On one GPU its kernel is compiled first, before the GPU is taken and while the job
        is still in the queue: the ahead thread, done with the job before it, takes this
        one meanwhile rather than the next, so the worker sees the step's attempts in
        order."""
        one_gpu = self._parallel is None
        if one_gpu and not self._begun(job):
            job = self._compiled(job)
        scheduled = self._take(job)
        if scheduled is None:
            job = self._compiled(job) if one_gpu else job  # a stale job's attempt, compiled now
            return self._call(lambda: self.backend.run_attempt(job, on_event))
        scheduled.done.wait()
        for event in scheduled.events:
            on_event(event)
        if scheduled.error is not None:
            raise scheduled.error
        assert scheduled.result is not None
        return scheduled.result

    def _compiled(self, job: AttemptJob) -> AttemptJob:
        """The job with its kernel compiled and audited (NVRTC, or the compile ahead in flight,
        outside the GPU's lock: a compile holds up no call of the graph's)."""
        return job if job.compiled is not None else dataclasses.replace(job, compiled=self.backend.compile(job.candidate))

    def _begun(self, job: AttemptJob) -> bool:
        """Whether a job filed under `job.key` has begun (its result is then taken, not run)."""
        with self._state:
            scheduled = self._jobs.get(job.key)
            return scheduled is not None and not any(q is scheduled for q in self._queue)

    def _take(self, job: AttemptJob) -> Optional[_Scheduled]:
        """The job filed under `job.key`, begun, for the same candidate and seed; None (and
        nothing filed there any more) otherwise."""
        with self._state:
            scheduled = self._jobs.pop(job.key, None)
            if scheduled is None:
                return None
            if any(q is scheduled for q in self._queue):  # not begun: the graph asks for it now, so it runs now
                self._queue.remove(scheduled)
                return None
            if (scheduled.job.candidate, scheduled.job.seed) != (job.candidate, job.seed):
                return None  # stale: the step was proposed again (its result is never used)
            return scheduled

    def _work(self) -> None:
        while True:
            with self._state:
                # On one GPU a call of the graph's goes first; several GPUs: the backend keeps one for it.
                while (not self._queue or (self._urgent and self._parallel is None)) and not self._closed:
                    self._state.wait()
                if self._closed:
                    return
                scheduled = self._next()
                best_ms, case_best_ms = self._bests
                job = dataclasses.replace(scheduled.job, best_ms=best_ms, case_best_ms=case_best_ms)
            try:
                if self._parallel is not None:
                    scheduled.result = self._parallel.run_attempt(dataclasses.replace(job, any_gpu=True),
                                                                  scheduled.events.append)
                else:
                    job = self._compiled(job)
                    with self._calls:
                        scheduled.result = self.backend.run_attempt(job, scheduled.events.append)
            except BaseException as e:  # raised in the graph's thread, where the result is taken
                scheduled.error = e
                if isinstance(e, EvaluationAborted):  # "stop now": nothing of this job is kept for a later run
                    with self._state:
                        if self._jobs.get(job.key) is scheduled:
                            del self._jobs[job.key]
                    self.cancel()
            finally:
                scheduled.done.set()

    def _next(self) -> _Scheduled:
        """Under `_state`: the first job not begun whose kernel is compiled already, else the
        first. The GPU does not wait on NVRTC for one of the step's kernels while another is
        ready; the graph still takes the results in the step's order, each screened against
        the best known when its job began."""
        facts = self._facts  # read by the plan, before any step; None: nothing is known
        ready = next((s for s in self._queue if facts is not None and
                      is_cached(s.job.candidate.source, s.job.candidate.entry, facts.arch,
                                s.job.candidate.compile_options())), None)
        scheduled = ready or self._queue[0]
        self._queue.remove(scheduled)
        return scheduled

    # -- the graph's own calls --------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        with self._state:
            self._urgent += 1
            aborts = self._aborts
        try:
            with self._calls:
                if self._aborts != aborts:  # "stop now" came while it waited: no new GPU work after it
                    raise EvaluationAborted("stopped by the user")
                return fn()
        finally:
            with self._state:
                self._urgent -= 1
                self._state.notify_all()

    def evaluate(self, candidate: Candidate, seed: int = DEFAULT_SEED, revalidate: bool = True,
                 time_cases: bool = True, validate: bool = True, on_event: EventSink = ignore) -> EvaluationResult:
        return self._call(lambda: self.backend.evaluate(candidate, seed, revalidate, time_cases, validate, on_event))

    def evaluate_many(self, candidates: list[Candidate], seed: int = DEFAULT_SEED) -> list[EvaluationResult]:
        return self._call(lambda: self.backend.evaluate_many(candidates, seed))

    def compile(self, candidate: Candidate) -> CompiledKernel:
        # Not under the lock: compiles are host work (the compile pool and its cache are
        # thread-safe), and a compile must not wait for the GPU's job in flight.
        return self.backend.compile(candidate)

    def baseline(self, seed: int = DEFAULT_SEED, kind: Optional[str] = None,
                 on_event: EventSink = ignore) -> Optional[EvaluationResult]:
        return self._call(lambda: self.backend.baseline(seed, kind, on_event))

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
        """From any thread: drop the jobs not begun and kill the GPU work in flight (a call
        of the graph's waiting for it is not started)."""
        with self._state:
            self._aborts += 1
        self.cancel()
        self.backend.abort()

    def close(self) -> None:
        """End the background threads (after the jobs in flight); the backend is the caller's to close."""
        with self._state:
            self._closed = True
            self._queue.clear()
            self._state.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join()
