"""EvaluatorDouble: stands in for the GPU evaluator on machines without a GPU.

Compilation is real (NVRTC needs no GPU); validation and timing are scripted: a
candidate's score is a deterministic function of its knob values, and a
candidate whose name contains a key of `fail` gets that status. The real
Evaluator runs in tests/test_gpu_evaluation.py on a GPU.

On Ray (tests/test_ray_backend.py) each GPU actor holds one, made by
`double_factory`; the test reaches into the actors' processes through files
(FileGate, `meet`, `die_at`), since their memory is not the test's.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

from warpsmith.agent.evaluate.attempt import AttemptJob, AttemptResult, ignore
from warpsmith.agent.evaluate.results import CaseResult, EvaluationResult, Status
from warpsmith.agent.evaluate.stats import TimingStats
from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.speed_of_light import Ceilings
from warpsmith.agent.spec.workload_model import Workload
from warpsmith.agent.worker.protocol import CaseCheck, CaseChecked, CaseTimed, TimingConfig

FACTS = DeviceFacts(name="EvaluatorDouble (no GPU)", arch="sm_90", sm_count=132, max_threads_per_block=1024,
                    smem_per_block_optin=232448, l2_bytes=60 << 20)


def knob_score(defines: dict) -> float:
    """Bigger tiles are faster, up to a point: a landscape with one optimum."""
    bm, bn, bk = defines.get("BM", 64), defines.get("BN", 64), defines.get("BK", 8)
    tm, tn = defines.get("TM", 8), defines.get("TN", 8)
    return 1.0 + abs(bm - 128) / 256 + abs(bn - 128) / 256 + abs(bk - 16) / 64 + (8 - tm) / 32 + (8 - tn) / 32


class Gate:
    """A test's hand on the GPU stand-in: evaluate() calls after the first `free` ones
    wait (abortable, like real GPU work) until the test calls release(), so the test
    knows exactly which evaluation is in flight when it presses a key."""

    def __init__(self, free: int = 0):
        self.free = free
        self.held = threading.Event()  # set once an evaluation waits here
        self.opened = threading.Event()

    def release(self) -> None:
        self.opened.set()


class FileEvent:
    """threading.Event's set / is_set across processes: a file that exists once set."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def set(self) -> None:
        self.path.touch()

    def is_set(self) -> bool:
        return self.path.exists()


class FileGate(Gate):
    """A Gate that works from another process (a Ray actor holding the double)."""

    def __init__(self, directory: Path, free: int = 0):
        self.free = free
        self.held = FileEvent(Path(directory) / "held")
        self.opened = FileEvent(Path(directory) / "opened")


def no_case_factor(defines, case) -> float:
    return 1.0


class EvaluatorDouble:
    def __init__(self, workload: Workload, fail: dict[str, str] | None = None, score=knob_score,
                 fresh_fail: set[str] | None = None, raise_at: int | None = None,
                 interrupt_at: int | None = None, delay_s: float = 0.0, gate: Gate | None = None,
                 error: Exception | None = None, case_factor=no_case_factor,
                 meet: tuple[Path, int] | None = None, die_at: tuple[int, Path] | None = None):
        self.workload, self.fail, self.score = workload, fail or {}, score
        self.case_factor = case_factor  # (knob values, case name) -> factor on that case's time
        self.fresh_fail = fresh_fail or set()
        self.raise_at = raise_at  # simulate a crash of the whole process at this evaluate() call
        self.error = error  # what raise_at raises (default: a RuntimeError), e.g. GpuUnavailable
        self.interrupt_at = interrupt_at  # simulate Ctrl-C arriving during this evaluate() call
        self.delay_s = delay_s  # GPU work takes time (for tests that measure time, not for synchronisation)
        self.gate = gate
        # (folder, n): once the folder exists (the test makes it when the calls it wants to see overlap are due),
        # each evaluate() waits until n calls, in any process, have arrived: proves they overlap; one that gave up
        # waiting leaves FOLDER.missed beside it
        self.meet = meet
        # (k, flag file): this process dies (os._exit) at its k-th evaluate() unless the flag exists; it
        # creates the flag first, so the process Ray restarts in its place lives on
        self.die_at = die_at
        self.aborted = False
        self.calls: list[tuple[str, int, bool]] = []
        self.rejected: list[str] = []  # candidates the scripted screen rejected early
        self.timing = TimingConfig()
        self.facts = FACTS
        self.ceilings = Ceilings(4000.0, 50.0, "EvaluatorDouble's made-up ceilings")
        self.closed = False

    def compile(self, candidate):
        import dataclasses
        r = compile_kernel(candidate.source, candidate.entry, "sm_90", candidate.compile_options(),
                           filename=f"{candidate.name}.cu")
        return dataclasses.replace(r, compile_ms=0.0)  # deterministic screens for snapshot tests

    def abort(self):
        self.aborted = True

    def evaluate(self, candidate, seed: int = 1, revalidate: bool = True, time_cases: bool = True,
                 validate: bool = True, on_event=ignore) -> EvaluationResult:
        self.calls.append((candidate.name, seed, time_cases))
        import time
        began = time.time()
        if self.die_at is not None and len(self.calls) == self.die_at[0] and not self.die_at[1].exists():
            self.die_at[1].touch()
            os._exit(1)
        meeting = self.meet is not None and self.meet[0].is_dir()
        if meeting:
            (self.meet[0] / f"{os.getpid()}-{threading.get_ident()}-{len(self.calls)}").touch()
        deadline = time.monotonic() + self.delay_s
        meet_by = time.monotonic() + 120.0  # then go on: the test fails on its assertions, it does not hang
        held = self.gate is not None and len(self.calls) > self.gate.free
        if held:
            self.gate.held.set()
        while time.monotonic() < deadline or (held and not self.gate.opened.is_set()) or \
                (meeting and len(list(self.meet[0].iterdir())) < self.meet[1] and time.monotonic() < meet_by):
            if self.aborted:
                self.aborted = False
                from warpsmith.agent.evaluate.worker_channel import EvaluationAborted
                raise EvaluationAborted("stopped by the user")
            time.sleep(0.01)
        if meeting and len(list(self.meet[0].iterdir())) < self.meet[1]:
            self.meet[0].with_name(self.meet[0].name + ".missed").touch()
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        if self.raise_at is not None and len(self.calls) >= self.raise_at:
            raise self.error or RuntimeError("EvaluatorDouble: simulated crash of the session process")
        compiled = self.compile(candidate)
        if not compiled.ok:
            return EvaluationResult(candidate.name, Status.COMPILE_FAILED, compiled, detail=compiled.log)
        status = Status(next((s for key, s in self.fail.items() if key in candidate.name), "ok"))
        if seed != 1 and any(key in candidate.name for key in self.fresh_fail):
            status = Status.WRONG_ANSWER
        score = self.score(candidate.knob_values())
        cases = []
        for c in self.workload.cases:
            r = CaseResult(c.case if hasattr(c, "case") else c.name, c.role, status,
                           check=CaseCheck(status, 1e-7, 1e-7, 0 if status == Status.OK else 3,
                                           "" if status == Status.OK else "output C: 3 wrong\npattern: only rows >= 64 wrong"))
            on_event(CaseChecked(r.case, "validate", r.check, 0.0))  # as the real worker streams them
            if status == Status.OK and c.timed and time_cases:
                ms = score * self.case_factor(candidate.knob_values(), r.case)
                samples = [ms] * 9 + [ms * 1.01]
                r.timing, r.samples_ms = TimingStats.of(samples), tuple(samples)
                on_event(CaseTimed(r.case, tuple(samples), ms, 0.0))
            cases.append(r)
        result = EvaluationResult(candidate.name, status, compiled, cases, seed=seed,
                                  detail="" if status == Status.OK else f"case '{cases[0].case}': {cases[0].check.detail}")
        perf = [c.timing.median_ms for c in cases if c.timing]
        if status == Status.OK and time_cases and perf:
            from warpsmith.agent.evaluate.stats import geomean
            result.score_ms = geomean(perf)
        result.began_s, result.wall_ms["total"] = began, (time.time() - began) * 1e3  # as the real one stamps it
        return result

    def evaluate_many(self, candidates, seed: int = 1) -> list[EvaluationResult]:
        return [self.evaluate(c, seed) for c in candidates]

    def run_attempt(self, job: AttemptJob, on_event=ignore) -> AttemptResult:
        """The attempt as the local evaluator runs it, scripted: its compile outcome streamed
        first; told the best, the scripted timing screened first by the real early-rejection
        rule (a rejected candidate is never validated); then a validation (one evaluate()
        call, nothing timed) and, when it passed, the timing (a second call, screened again
        when told the best, as a kernel that slowed down would be)."""
        compiled = job.compiled if job.compiled is not None else self.compile(job.candidate)
        on_event(compiled)
        if job.best_ms is not None:
            timed = self._screened(job.candidate, job.seed, job.best_ms, job.case_best_ms, on_event)
            if timed.status == Status.REJECTED_EARLY:
                timed.cases = [c for c in timed.cases if c.role == "performance"]
                return AttemptResult(timed)
        validated = self.evaluate(job.candidate, job.seed, revalidate=False, time_cases=False, on_event=on_event)
        if not validated.ok:
            return AttemptResult(validated)
        timed = self._screened(job.candidate, job.seed, job.best_ms, job.case_best_ms, on_event) \
            if job.best_ms is not None else self.evaluate(job.candidate, job.seed, on_event=on_event)
        return AttemptResult(validated, timed)

    def _screened(self, candidate, seed: int, best_ms: float, case_best_ms, on_event) -> EvaluationResult:
        result = self.evaluate(candidate, seed, on_event=on_event)
        if result.ok:
            from warpsmith.agent.evaluate.early_reject import screen
            verdict = screen({c.case: c.samples_ms for c in result.cases if c.role == "performance"}, best_ms,
                             case_best_ms=case_best_ms)
            if verdict.reject:
                self.rejected.append(candidate.name)
                result.status, result.detail, result.score_ms = Status.REJECTED_EARLY, verdict.note, None
            else:  # kept: its screen archived, as the local evaluator does
                result.screen_ms = {c.case: tuple(c.samples_ms) for c in result.cases if c.role == "performance"}
        return result

    def baseline_kinds(self):
        return ["cublas_sgemm", "torch_eager"]

    def baseline(self, seed: int = 1, kind: str | None = None, on_event=ignore):
        """cuBLAS at 0.5 ms per case; the PyTorch stand-in at 0.6 ms."""
        ms = 0.6 if kind == "torch_eager" else 0.5
        cases = [CaseResult(c.name, c.role, Status.OK, check=CaseCheck(Status.OK),
                            timing=TimingStats.of([ms] * 10) if c.timed else None) for c in self.workload.cases]
        return EvaluationResult(kind or "cublas_sgemm", Status.OK, None, cases, score_ms=ms)

    def close(self):
        self.closed = True


def _make_double(workload: Workload, options, worker_log, **kwargs) -> EvaluatorDouble:
    return EvaluatorDouble(workload, **kwargs)


def double_factory(**kwargs):
    """What a Ray GPU actor builds in place of the local Evaluator: an EvaluatorDouble with
    these arguments (agent/evaluate/ray_actor.py's EvaluatorFactory)."""
    return functools.partial(_make_double, **kwargs)
