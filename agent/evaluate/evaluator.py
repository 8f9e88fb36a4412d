"""Evaluation of a candidate against a workload, the DESIGN.md recipe:

1. compile (NVRTC; errors go back verbatim);
2. validate every case: seeded inputs, cached float64 reference, poisoned
   outputs, guard bands, inputs checked unchanged;
3. time the performance cases (warm-up, then one event pair per launch, cold L2);
4. validate again after timing (catches kernels that change behaviour);
5. a median below the case's speed-of-light floor fails (``below_floor``);
6. score = geometric mean of the performance medians.

Every judged and every timed launch starts from poisoned outputs and is checked
(agent.worker.poison, agent.worker.timed_checks); after each candidate the worker checks every
resident input and reference against its checksum.

The loop runs an attempt as two requests to one worker, validate() then
benchmark(): the CUBIN is loaded once and each case validated once before timing
(agent.worker.protocol.Step). eval and bench send the whole recipe at once.

GPU work happens in a worker process (agent/evaluate/worker_channel.py). A fault or a
hang costs the worker, which is restarted on the next call; the candidate is ``crashed``
/ ``timeout``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

from ..runtime.compiler import CompiledKernel
from ..spec import precision_policy
from ..spec.applicability import malformed
from ..spec.candidate import Candidate
from ..spec.workload_model import Workload
from ..worker.process import WorkerProcess
from ..worker.protocol import ATTEMPT, EvaluateBaseline, EvaluateKernel, Step, TimingConfig
from .backend import EvaluationBackend
from .case_requests import case_job, case_jobs
from .compile_audit import compile_candidate
from .deadlines import TORCH_COMPILE_S
from .early_reject import screen, screen_timing
from .options import EvaluationOptions
from .results import CaseResult, EvaluationResult, Progress, Status
from .verdict import NOT_REVALIDATED, contender, coverage_problem, finish, gate_floor, passed, screen_best
from .worker_channel import WorkerChannel

DEFAULT_SEED = 1
FRESH_SEED = 2  # a new best is validated again on inputs from this seed


@dataclasses.dataclass(frozen=True)
class _Validated:
    """What benchmark() needs to continue an attempt: the exact request validated, on which worker."""

    request: EvaluateKernel
    worker: Optional[WorkerProcess]
    result: EvaluationResult
    screened: bool = False  # the early-rejection screen ran before the validation and kept it


class Evaluator(WorkerChannel, EvaluationBackend):
    def __init__(self, workload: Workload, options: EvaluationOptions = EvaluationOptions(),
                 on_event: Optional[Callable[[object], None]] = None, worker_log: Optional[Path] = None):
        workload.check_evaluable()  # SpecError before any worker starts (e.g. cuBLAS SGEMM on bf16)
        self.workload = workload
        super().__init__(options.device, options.timing, options.kernel_timeout_s, on_event, worker_log)
        self.timing: TimingConfig = options.timing
        self.reference_timeout_s = options.reference_timeout_s  # reference.py's limit per case (agent/spec/reference_run.py)
        self._validated: Optional[_Validated] = None  # the attempt validate() passed last

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
                 time_cases: bool = True, validate: bool = True) -> EvaluationResult:
        """The whole recipe in one request (eval, bench, the selection's re-timing).
        `validate=False` times only, the performance cases alone in the result: for the
        selection's re-timing of two kernels both validated already (every timed launch's
        outputs are still checked)."""
        if not validate and not time_cases:
            raise ValueError("evaluate: neither validating nor timing is nothing to do")
        steps = ((Step.VALIDATE,) if validate else ()) \
            + (((Step.TIME,) + ((Step.REVALIDATE,) if revalidate else ())) if time_cases else ())
        t_start = time.perf_counter()
        result, request = self._request(candidate, seed, t_start)
        if not validate:
            result.cases = [c for c in result.cases if c.role == "performance"]
            if request is not None:  # validated already, the caller's premise; a check failing in the timing loop still fails it
                for c in result.cases:
                    if c.status != Status.NOT_APPLICABLE:
                        c.status = Status.OK
        return self._steps(result, request, steps, t_start)

    def evaluate_many(self, candidates: list[Candidate], seed: int = DEFAULT_SEED) -> list[EvaluationResult]:
        """One GPU: one after another, in order."""
        return [self.evaluate(c, seed) for c in candidates]

    def validate(self, candidate: Candidate, seed: int = DEFAULT_SEED, best_ms: Optional[float] = None,
                 case_best_ms: Optional[Mapping[str, float]] = None) -> EvaluationResult:
        """An attempt's first half: every case validated, nothing timed. A pass is kept
        so that benchmark() continues this attempt instead of starting it again.

        Given the best score so far, the early-rejection screen comes first: a candidate
        the first chunk of launches rejects is never validated (it can never be accepted
        either), so a clearly slower kernel costs a chunk of launches, not a validation of
        every case as well. The screen is no blind spot: every timed launch's outputs are
        checked against the reference, the guard bands and inputs after the chunk and the
        sweep after the request, as for any timing; a failure there is the attempt's
        verdict. A candidate the screen keeps is validated, then timed in full by
        benchmark() without a second screen."""
        t_start = time.perf_counter()
        result, request = self._request(candidate, seed, t_start)
        self._validated = None
        if request is not None and best_ms is not None:
            screened = copy.deepcopy(result)
            verdict = self._screen_first(screened, request, best_ms, t_start, case_best_ms)
            if verdict is not None:
                verdict.gpu = self.gpu_label()
                return verdict
            result.screen_ms = screened.screen_ms
        result = self._steps(result, request, (Step.VALIDATE,), t_start)
        if result.ok and request:
            self._validated = _Validated(request, self._worker, copy.deepcopy(result), screened=best_ms is not None)
        return result

    def benchmark(self, candidate: Candidate, seed: int = DEFAULT_SEED, best_ms: Optional[float] = None,
                  case_best_ms: Optional[Mapping[str, float]] = None) -> EvaluationResult:
        """An attempt's second half: time and revalidate the kernel validate() passed last,
        on the worker that validated it, which still has it loaded (one request, no second
        validation). Anything else (another kernel, a restarted worker, a resumed session)
        gets the whole recipe.

        Given the best score so far (`best_ms`), a first chunk of launches per performance
        case comes first, and a candidate clearly slower than the best (and, given
        `case_best_ms`, than each case's fastest median so far) stops there:
        ``rejected_early``, its partial samples kept (agent/evaluate/early_reject.py).
        Otherwise the chunk was a screen only: the full timing's samples are the record.

        Given both bests, only a contender is revalidated after its timing: one faster than
        the best, or than some case's fastest median (a dispatch could take it there). Any
        other can never be chosen (agent/evaluate/selection.py and dispatch.update_winners
        compare with the same bests), so validating every case again would only spend the
        GPU; it stays ok, validated before its timing and checked in every timed launch,
        and its detail says it was not revalidated."""
        t_start = time.perf_counter()
        result, request = self._request(candidate, seed, t_start)
        v, self._validated = self._validated, None
        if v is None or request is None or request != v.request or self._worker is not v.worker \
                or self._worker is None or not self._worker.alive:
            return self._steps(result, request, ATTEMPT, t_start)
        validated = copy.deepcopy(v.result)
        validated.status, validated.compiled = Progress.PENDING, result.compiled
        validated.wall_ms["compile"] = result.wall_ms["compile"]
        if best_ms is not None and not v.screened:
            screened = self._screen(validated, request, best_ms, t_start, case_best_ms)
            if screened is not None:
                return screened
        if best_ms is None or case_best_ms is None:
            return self._steps(validated, request, (Step.TIME, Step.REVALIDATE), t_start)
        self._run(dataclasses.replace(request, steps=(Step.TIME,)), validated)
        if validated.status == Progress.PENDING and all(passed(c) for c in validated.cases):
            if contender(validated, best_ms, case_best_ms):
                self._run(dataclasses.replace(request, steps=(Step.REVALIDATE,)), validated)
            else:
                validated.detail = NOT_REVALIDATED
        self._gate_floor(validated)
        validated.gpu = self.gpu_label()
        return finish(validated, t_start)

    def _screen(self, result: EvaluationResult, request: EvaluateKernel, best_ms: float,
                t_start: float, case_best_ms: Optional[Mapping[str, float]] = None) -> Optional[EvaluationResult]:
        """The first chunk of launches per performance case: the finished result if it failed
        there or the rule rejects it, else None (time it in full)."""
        self._run(dataclasses.replace(request, steps=(Step.TIME,), timing=screen_timing(request.timing)), result)
        if result.status != Progress.PENDING or not all(passed(c) for c in result.cases):
            return finish(result, t_start)  # unstable, crashed... in the chunk: a verdict already
        chunks = {c.case: c.samples_ms for c in result.cases if c.role == "performance" and c.samples_ms}
        verdict = screen(chunks, screen_best(result, best_ms, case_best_ms), case_best_ms=case_best_ms)
        if not verdict.reject:
            result.screen_ms = {case: tuple(s) for case, s in chunks.items() if s}
            return None
        result.status, result.detail = Status.REJECTED_EARLY, verdict.note
        return finish(result, t_start)

    def _screen_first(self, result: EvaluationResult, request: EvaluateKernel, best_ms: float, t_start: float,
                      case_best_ms: Optional[Mapping[str, float]]) -> Optional[EvaluationResult]:
        """The first chunk of launches per performance case, before any validation: the
        verdict (a failure in the chunk, or rejected early), the performance cases alone in
        it, or None (validate, then time in full)."""
        self._run(dataclasses.replace(request, steps=(Step.TIME,), timing=screen_timing(request.timing)), result)
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

    def _request(self, candidate: Candidate, seed: int,
                 t_start: float) -> tuple[EvaluationResult, Optional[EvaluateKernel]]:
        """Compile and resolve every case's launch: the request to send, or a result that
        is already a verdict (compile_failed, launch_invalid) and no request."""
        compiled = self.compile(candidate)
        self.on_event(compiled)
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
               t_start: float) -> EvaluationResult:
        if request is not None:
            self._run(dataclasses.replace(request, steps=steps), result)
            self._gate_floor(result)
        result.gpu = self.gpu_label()
        return finish(result, t_start)

    def baseline_kinds(self) -> list[str]:
        """The baselines this workload has and this machine can run (PyTorch's need torch)."""
        from ..worker.torch_baseline import torch_available
        kinds = self.workload.baseline.kinds()
        return kinds if torch_available() else [k for k in kinds if not k.startswith("torch")]

    def baseline(self, seed: int = DEFAULT_SEED, kind: Optional[str] = None) -> Optional[EvaluationResult]:
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
            self._run(EvaluateBaseline(kind, b.bind, tuple(jobs), seed, self.timing, str(b.torch or "")), result)
        finally:
            self.deadlines.setup_s = 0.0
        return finish(result, t_start)

    def _gate_floor(self, result: EvaluationResult) -> None:
        """The speed-of-light gate (verdict.gate_floor), on cold timing only."""
        gate_floor(result, self.workload, self.ceilings if self.timing.cold_l2 else None)
