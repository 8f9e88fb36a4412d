"""Evaluation of a candidate against a workload, the DESIGN.md recipe:

1. compile (NVRTC; errors go back verbatim) and audit the compiled code;
2. validate every case: seeded inputs, cached float64 reference, poisoned
   outputs, guard bands, inputs checked unchanged;
3. time the performance cases (warm-up, then one event pair per launch, cold L2);
4. validate again after timing (catches kernels that change behaviour);
5. a median below the case's speed-of-light floor fails (``below_floor``);
6. score = geometric mean of the performance medians.

Every judged and every timed launch starts from poisoned outputs and is checked
(warpsmith.agent.worker.poison, warpsmith.agent.worker.timed_checks); after each candidate the worker checks every
resident input and reference against its checksum.

The loop's attempt is run_attempt(): one call from candidate to verdict, the kernel
compiled and audited once and loaded once, its requests sent to one worker in turn
(the screen, the validation, the timing, the revalidation: warpsmith.agent.worker.protocol.Step),
each case validated once before timing. eval and bench send the whole recipe at once
(evaluate()).

GPU work happens in a worker process (agent/evaluate/worker_channel.py). A fault or a
hang costs the worker, which is restarted on the next call; the candidate is ``crashed``
/ ``timeout``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path
from typing import Mapping, Optional

from ..runtime.compiler import CompiledKernel
from ..spec import precision_policy
from ..spec.applicability import malformed
from ..spec.candidate import Candidate
from ..spec.timing_policy import screen_timing
from ..spec.workload_model import Workload
from ..worker.protocol import EvaluateBaseline, EvaluateKernel, Step, TimingConfig
from .attempt import DEFAULT_SEED as DEFAULT_SEED  # where the loop's seed lives; importers here read it
from .attempt import AttemptJob, AttemptResult, EventSink, ignore
from .backend import EvaluationBackend
from .case_requests import case_job, case_jobs
from .compile_audit import compile_candidate
from .deadlines import TORCH_COMPILE_S
from .early_reject import screen
from .options import EvaluationOptions
from .results import CaseResult, EvaluationResult, Progress, Status
from .verdict import NOT_REVALIDATED, contender, coverage_problem, finish, gate_floor, passed, screen_best
from .worker_channel import WorkerChannel

FRESH_SEED = 2  # a new best is validated again on inputs from this seed


class Evaluator(WorkerChannel, EvaluationBackend):
    def __init__(self, workload: Workload, options: EvaluationOptions = EvaluationOptions(),
                 worker_log: Optional[Path] = None):
        workload.check_evaluable()  # SpecError before any worker starts (e.g. cuBLAS SGEMM on bf16)
        self.workload = workload
        super().__init__(options.device, options.timing, options.kernel_timeout_s, worker_log, options.separate_judge)
        self.timing: TimingConfig = options.timing
        self.reference_timeout_s = options.reference_timeout_s  # reference.py's limit per case (agent/spec/reference_run.py)

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- evaluation -------------------------------------------------------
    def compile(self, candidate: Candidate) -> CompiledKernel:
        return compile_candidate(candidate, self.facts.arch, self.workload.tolerance.allow_fast_math,
                                 wide_accumulation=self.workload.wide_accumulation,
                                 narrow_allowed=precision_policy.allowed_types(self.workload))

    def evaluate(self, candidate: Candidate, seed: int = DEFAULT_SEED, revalidate: bool = True,
                 time_cases: bool = True, validate: bool = True, on_event: EventSink = ignore) -> EvaluationResult:
        """The whole recipe in one request (eval, bench, the selection's re-timing).
        `validate=False` times only, the performance cases alone in the result: for the
        selection's re-timing of two kernels both validated already (every timed launch's
        outputs are still checked)."""
        if not validate and not time_cases:
            raise ValueError("evaluate: neither validating nor timing is nothing to do")
        steps = ((Step.VALIDATE,) if validate else ()) \
            + (((Step.TIME,) + ((Step.REVALIDATE,) if revalidate else ())) if time_cases else ())
        t_start = time.perf_counter()
        result, request = self._request(candidate, seed, t_start, on_event)
        if not validate:
            result.cases = [c for c in result.cases if c.role == "performance"]
            if request is not None:  # validated already, the caller's premise; a check failing in the timing loop still fails it
                for c in result.cases:
                    if c.status != Status.NOT_APPLICABLE:
                        c.status = Status.OK
        return self._steps(result, request, steps, t_start, on_event)

    def evaluate_many(self, candidates: list[Candidate], seed: int = DEFAULT_SEED) -> list[EvaluationResult]:
        """One GPU: one after another, in order."""
        return [self.evaluate(c, seed) for c in candidates]

    def run_attempt(self, job: AttemptJob, on_event: EventSink = ignore) -> AttemptResult:
        """The loop's attempt, from candidate to verdict, on this GPU's worker:

        1. compile and audit (the job's kernel as it comes, if compiled already);
        2. given the best so far, the early-rejection screen: a first chunk of launches
           per performance case, before any validation. A candidate it rejects is
           ``rejected_early`` and never validated (it can never be accepted either), so a
           clearly slower kernel costs a chunk of launches, not a validation of every case
           as well. No blind spot: every timed launch's outputs are checked against the
           reference, the guard bands and inputs after the chunk and the sweep after the
           request, as for any timing; a failure there is the attempt's verdict;
        3. validate every case (the attempt's `validated` result);
        4. when it passed, time (in full: the screen, if any, was the screen only) and
           revalidate on the same worker, which has the kernel loaded: `timed`.

        Given both bests (the score and each case's fastest median), only a contender is
        revalidated after its timing: one faster than the best, or than some case's fastest
        median (a dispatch could take it there). Any other can never be chosen
        (agent/evaluate/selection.py and dispatch.update_winners compare with the same
        bests), so validating every case again would only spend the GPU; it stays ok,
        validated before its timing and checked in every timed launch, and its detail says
        it was not revalidated."""
        t_start = time.perf_counter()
        result, request = self._request(job.candidate, job.seed, t_start, on_event, job.compiled)
        if request is not None and job.best_ms is not None:
            screened = copy.deepcopy(result)
            verdict = self._screen_first(screened, request, job.best_ms, t_start, job.case_best_ms, on_event)
            if verdict is not None:
                verdict.gpu = self.gpu_label()
                return AttemptResult(verdict)
            result.screen_ms = screened.screen_ms
        validated = self._steps(result, request, (Step.VALIDATE,), t_start, on_event)
        if request is None or not validated.ok:
            return AttemptResult(validated)
        return AttemptResult(validated, self._time(copy.deepcopy(validated), request, job, on_event))

    def _time(self, result: EvaluationResult, request: EvaluateKernel, job: AttemptJob,
              on_event: EventSink) -> EvaluationResult:
        """Step 4 of run_attempt on a copy of its validated result: time, revalidate, gate."""
        t_start = time.perf_counter()
        result.status = Progress.PENDING
        if job.best_ms is None or job.case_best_ms is None:
            return self._steps(result, request, (Step.TIME, Step.REVALIDATE), t_start, on_event)
        self._run(dataclasses.replace(request, steps=(Step.TIME,)), result, on_event)
        if result.status == Progress.PENDING and all(passed(c) for c in result.cases):
            if contender(result, job.best_ms, job.case_best_ms):
                self._run(dataclasses.replace(request, steps=(Step.REVALIDATE,)), result, on_event)
            else:
                result.detail = NOT_REVALIDATED
        self._gate_floor(result)
        result.gpu = self.gpu_label()
        return finish(result, t_start)

    def _screen_first(self, result: EvaluationResult, request: EvaluateKernel, best_ms: float, t_start: float,
                      case_best_ms: Optional[Mapping[str, float]], on_event: EventSink) -> Optional[EvaluationResult]:
        """The first chunk of launches per performance case, before any validation: the
        verdict (a failure in the chunk, or rejected early), the performance cases alone in
        it, or None (validate, then time in full)."""
        self._run(dataclasses.replace(request, steps=(Step.TIME,), timing=screen_timing(request.timing)), result,
                  on_event)
        result.cases = [c for c in result.cases if c.role == "performance" or c.status != Progress.PENDING]
        for c in result.cases:  # a case whose every timed launch passed its check
            if c.status == Progress.PENDING and c.timing is not None:
                c.status = Status.OK
        if result.status != Progress.PENDING or not all(passed(c) for c in result.cases):
            return finish(result, t_start)  # wrong in a timed launch, out of bounds, crashed...: a verdict already
        chunks = {c.case: c.samples_ms for c in result.cases if c.samples_ms}
        verdict = screen(chunks, screen_best(result, best_ms, case_best_ms), case_best_ms=case_best_ms)
        if not verdict.reject:
            result.screen_ms = {case: tuple(s) for case, s in chunks.items() if s}
            return None
        result.status, result.detail = Status.REJECTED_EARLY, verdict.note + \
            " (before validation: every screened launch of the performance cases was checked; the " \
            "correctness cases were not run, so it is not known to be correct)"
        return finish(result, t_start)

    def _request(self, candidate: Candidate, seed: int, t_start: float, on_event: EventSink,
                 compiled: Optional[CompiledKernel] = None) -> tuple[EvaluationResult, Optional[EvaluateKernel]]:
        """Compile (unless `compiled` is given) and resolve every case's launch: the request
        to send, or a result that is already a verdict (compile_failed, launch_invalid) and
        no request. The compile outcome is the first event streamed."""
        compiled = compiled if compiled is not None else self.compile(candidate)
        on_event(compiled)
        result = EvaluationResult(candidate.name, Progress.PENDING, compiled, seed=seed)
        result.wall_ms["compile"] = (time.perf_counter() - t_start) * 1e3
        if not compiled.ok:
            result.status, result.detail = Status.COMPILE_FAILED, compiled.log
            return result, None
        broken = malformed(self.workload, candidate)  # a program naming what does not exist: wrong everywhere
        if broken:
            result.status, result.detail = Status.LAUNCH_INVALID, f"program: {broken}"
            return result, None
        jobs = case_jobs(self.workload, candidate, self.facts, seed, self.reference_timeout_s, result)
        refusal = coverage_problem(result.cases)
        if refusal:
            result.status, result.detail = Status.LAUNCH_INVALID, refusal
            return result, None
        return result, EvaluateKernel(compiled.cubin, compiled.symbol, tuple(jobs), seed, self.timing)

    def _steps(self, result: EvaluationResult, request: Optional[EvaluateKernel], steps: tuple[Step, ...],
               t_start: float, on_event: EventSink) -> EvaluationResult:
        if request is not None:
            self._run(dataclasses.replace(request, steps=steps), result, on_event)
            self._gate_floor(result)
        result.gpu = self.gpu_label()
        return finish(result, t_start)

    def baseline_kinds(self) -> list[str]:
        """The baselines this workload has and this machine can run (PyTorch's need torch)."""
        from ..worker.torch_baseline import torch_available
        kinds = self.workload.baseline.kinds()
        return kinds if torch_available() else [k for k in kinds if not k.startswith("torch")]

    def baseline(self, seed: int = DEFAULT_SEED, kind: Optional[str] = None,
                 on_event: EventSink = ignore) -> Optional[EvaluationResult]:
        """A library on the same cases, timed by the same loop in the same worker: the
        workload's own baseline by default, or `kind` (one of baseline_kinds()); None if
        there is none to run."""
        kind = kind or self.workload.baseline.primary
        if kind not in self.baseline_kinds():
            return None
        b = self.workload.baseline
        t_start = time.perf_counter()
        result = EvaluationResult(kind, Progress.PENDING, None, seed=seed)
        jobs = []
        # torch.compile recompiles for every shape: it runs on the performance cases only.
        cases = [c for c in self.workload.cases if c.timed or kind != "torch_compile"]
        for case in cases:
            result.cases.append(CaseResult(case.name, case.role))
            jobs.append(case_job(self.workload, case, seed, None, self.reference_timeout_s))
        # torch.compile compiles on each case's first (validation) call: allow for it.
        self.deadlines.setup_s = TORCH_COMPILE_S if kind == "torch_compile" else 0.0
        try:
            self._run(EvaluateBaseline(kind, b.bind, tuple(jobs), seed, self.timing, str(b.torch or "")), result,
                      on_event)
        finally:
            self.deadlines.setup_s = 0.0
        return finish(result, t_start)

    def _gate_floor(self, result: EvaluationResult) -> None:
        """The speed-of-light gate (verdict.gate_floor), on cold timing only."""
        gate_floor(result, self.workload, self.ceilings if self.timing.cold_l2 else None)
