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

GPU work happens in a worker process. A fault or a hang costs the worker, which
is restarted on the next call; the candidate is ``crashed`` / ``timeout``.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

from ..runtime.compiler import CompiledKernel
from ..runtime.device_facts import DeviceFacts
from ..spec import precision_policy
from ..spec.applicability import coverage_gap, malformed
from ..spec.candidate import Candidate
from ..spec.inputs import array_jobs
from ..spec.launch import Launch, LaunchJob, ProgramJob
from ..spec.references import ensure_reference
from ..spec.speed_of_light import Ceilings, case_floor, load_ceilings
from ..spec.tolerance import case_rtol
from ..spec.workload_model import ArrayParam, Case, ScalarParam, Workload, array_layouts, program_problem
from ..worker.case_buffers import guard_bytes
from ..worker.footprint import GPU_FRACTION, case_footprint
from ..worker.gpu_side import RECOVERABLE
from ..worker.pages import in_pages
from ..worker.process import WorkerDied, WorkerProcess, WorkerTimeout
from ..worker.protocol import (
    ATTEMPT,
    Arg,
    CaseChecked,
    CaseJob,
    CaseTimed,
    EvaluateBaseline,
    EvaluateKernel,
    Fault,
    JobDone,
    Started,
    Step,
    TimingConfig,
)
from .backend import EvaluationBackend
from .compile_audit import compile_candidate
from .early_reject import screen, screen_timing
from .options import EvaluationOptions
from .results import CaseResult, EvaluationResult, Progress, Status
from .stats import TimingStats, geomean

DEFAULT_SEED = 1
FRESH_SEED = 2  # a new best is validated again on inputs from this seed
TORCH_COMPILE_S = 300.0  # torch.compile's first call per shape (Inductor, Triton autotuning)
CASE_SETUP_S = 120.0  # first use of a case: inputs drawn, reference loaded, uploads


@dataclasses.dataclass(frozen=True)
class _Validated:
    """What benchmark() needs to continue an attempt: the exact request validated, on which worker."""

    request: EvaluateKernel
    worker: Optional[WorkerProcess]
    result: EvaluationResult
    screened: bool = False  # the early-rejection screen ran before the validation and kept it


class EvaluationAborted(RuntimeError):
    """abort() was called: the GPU work in flight was killed on purpose ("stop now")."""


class Evaluator(EvaluationBackend):
    def __init__(self, workload: Workload, options: EvaluationOptions = EvaluationOptions(),
                 on_event: Optional[Callable[[object], None]] = None, worker_log: Optional[Path] = None):
        workload.check_evaluable()  # SpecError before any worker starts (e.g. cuBLAS SGEMM on bf16)
        self.workload = workload
        self.timing: TimingConfig = options.timing
        self.ordinal = options.device
        self.reference_timeout_s = options.reference_timeout_s  # reference.py's limit per case (agent/spec/reference_run.py)
        self.worker_log = worker_log
        self.kernel_timeout_s = options.kernel_timeout_s
        self.on_event = on_event or (lambda event: None)
        self._worker: Optional[WorkerProcess] = None
        # The GPU's facts, from the first worker's hello: a restarted worker opens the same
        # GPU. Read per case for every candidate (_device_problem), so not through worker(),
        # whose lock and liveness check the thread feeding the GPU paid each time.
        self._facts: Optional[DeviceFacts] = None
        self.restarts = 0
        self._aborted = False
        self._validate_s: dict[str, float] = {}  # last validation wall time per case
        self._setup_s = 0.0  # extra allowance while a baseline compiles (torch.compile)
        self._validated: Optional[_Validated] = None  # the attempt validate() passed last
        # worker() runs outside AheadEvaluator's lock (the first facts read, a request): after
        # a crash the ahead thread and the graph's compile node may both find the worker dead,
        # and each would start one (the other orphaned, holding a CUDA context and every
        # case's buffers).
        self._restart = threading.Lock()

    # -- worker lifecycle -------------------------------------------------
    def worker(self) -> WorkerProcess:
        with self._restart:
            if self._worker is None or not self._worker.alive:
                if self._worker is not None:
                    self._worker.kill()
                    self.restarts += 1
                self._worker = WorkerProcess(self.ordinal, log_path=self.worker_log)
            return self._worker

    @property
    def facts(self) -> DeviceFacts:
        if self._facts is None:
            self._facts = self.worker().ready.facts
        return self._facts

    @property
    def ceilings(self) -> Optional[Ceilings]:
        """This GPU's measured ceilings (the worker probes once per GPU), else datasheet leads."""
        return self.worker().ready.ceilings or load_ceilings(self.facts)

    def abort(self) -> None:
        """Kill the GPU work in flight, from any thread; the call waiting on it raises
        EvaluationAborted (nothing is recorded as a crash). The next call restarts the worker."""
        self._aborted = True
        worker = self._worker
        if worker is not None:
            worker.kill_process()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs -------------------------------------------------------------
    def _case_job(self, case: Case, seed: int, launch: Optional[Launch]) -> CaseJob:
        w = self.workload
        args, scalars = [], {}
        for p in w.params:
            if isinstance(p, ArrayParam):
                args.append(Arg(array=p.name))
            else:
                kind, value = p.arg(case)
                args.append(Arg(kind=kind, value=value))
                scalars[p.name] = value
        rtol = {p.name: case_rtol(w, case, p.dtype) for p in w.outputs}
        return CaseJob(case.name, tuple(array_jobs(w, case)), tuple(args),
                       str(ensure_reference(w, case, seed, self.reference_timeout_s)), rtol, case.timed, launch, scalars)

    def _resolve_launch(self, candidate: Candidate, case: Case) -> tuple[Optional[Launch], str]:
        try:
            launch = candidate.rule_for(case).resolve(candidate.launch_env(case))
        except ValueError as e:  # ExprError, or a malformed `// knob` declaration
            return None, f"launch rule for case '{case.name}': {e}"
        problem = launch.problems() or self._device_problem(launch)
        return launch, (f"case '{case.name}': {problem}" if problem else "")

    def _device_problem(self, launch: Launch) -> str:
        facts = self.facts
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        if threads > facts.max_threads_per_block:
            return f"block {launch.block} has {threads} threads, the GPU allows {facts.max_threads_per_block}"
        if launch.shared > facts.smem_per_block_optin:
            return f"{launch.shared} B dynamic shared memory, the GPU allows {facts.smem_per_block_optin}"
        if launch.cluster != (1, 1, 1) and facts.cc_major < 9:
            return f"cluster {launch.cluster}: thread block clusters need compute capability 9.0 or newer"
        return ""

    def _workspace_room(self) -> Optional[tuple[int, int, int]]:
        """(bytes a program's workspace may take over all cases, the cases' own bytes, the GPU's
        memory), None where the GPU's memory is not known. The cases' buffers stay resident
        (agent/worker/footprint.py counts them), and so does each case's workspace while its
        kernel is loaded (GpuWorker.program)."""
        total = self.facts.total_memory
        if not total:
            return None
        resident = sum(case_footprint(self.workload, c, "gpu") for c in self.workload.cases)
        return int(total * GPU_FRACTION) - resident, resident, total

    def _resolve_program(self, candidate: Candidate, case: Case) -> tuple[Optional[ProgramJob], str]:
        """A program's steps and workspace for `case`, or why it cannot run there."""
        w, program = self.workload, candidate.program
        assert program is not None  # called for programs only
        problem = program_problem(w, program, case, candidate.launch_env(case))
        if problem:
            return None, f"program for case '{case.name}': {problem}"
        job = program.resolve(candidate.launch_env(case),
                              {p.name: p.arg(case) for p in w.params if isinstance(p, ScalarParam)},
                              array_layouts(w, case))
        for step in job.steps:
            problem = self._device_problem(step.launch) if isinstance(step, LaunchJob) else ""
            if problem and isinstance(step, LaunchJob):
                return None, f"case '{case.name}': {step.entry}: {problem}"
        return job, ""

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
        if validated.status == Progress.PENDING and all(_passed(c) for c in validated.cases):
            if contender(validated, best_ms, case_best_ms):
                self._run(dataclasses.replace(request, steps=(Step.REVALIDATE,)), validated)
            else:
                validated.detail = NOT_REVALIDATED
        self._gate_floor(validated)
        validated.gpu = self.gpu_label()
        return _finish(validated, t_start)

    def _screen(self, result: EvaluationResult, request: EvaluateKernel, best_ms: float,
                t_start: float, case_best_ms: Optional[Mapping[str, float]] = None) -> Optional[EvaluationResult]:
        """The first chunk of launches per performance case: the finished result if it failed
        there or the rule rejects it, else None (time it in full)."""
        self._run(dataclasses.replace(request, steps=(Step.TIME,), timing=screen_timing(request.timing)), result)
        if result.status != Progress.PENDING or not all(_passed(c) for c in result.cases):
            return _finish(result, t_start)  # unstable, crashed... in the chunk: a verdict already
        chunks = {c.case: c.samples_ms for c in result.cases if c.role == "performance" and c.samples_ms}
        verdict = screen(chunks, _screen_best(result, best_ms, case_best_ms), case_best_ms=case_best_ms)
        if not verdict.reject:
            result.screen_ms = {case: tuple(s) for case, s in chunks.items() if s}
            return None
        result.status, result.detail = Status.REJECTED_EARLY, verdict.note
        return _finish(result, t_start)

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
        if result.status != Progress.PENDING or not all(_passed(c) for c in result.cases):
            return _finish(result, t_start)  # wrong in a timed launch, out of bounds, crashed...: a verdict already
        chunks = {c.case: c.samples_ms for c in result.cases if c.samples_ms}
        verdict = screen(chunks, _screen_best(result, best_ms, case_best_ms), case_best_ms=case_best_ms)
        if not verdict.reject:
            result.screen_ms = {case: tuple(s) for case, s in chunks.items() if s}
            return None
        result.status, result.detail = Status.REJECTED_EARLY, verdict.note + \
            " (before validation: every screened launch of the performance cases was checked; the " \
            "correctness cases were not run, so it is not known to be correct)"
        return _finish(result, t_start)

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
        jobs = []
        room = self._workspace_room() if candidate.program is not None else None
        workspace = 0
        broken = malformed(self.workload, candidate)  # a program naming what does not exist: wrong everywhere
        if broken:
            result.status, result.detail = Status.LAUNCH_INVALID, f"program: {broken}"
            return result, None
        for case in self.workload.cases:
            program, launch, problem = None, None, ""
            if candidate.program is not None:
                program, problem = self._resolve_program(candidate, case)
                if program is not None and room is not None:
                    size = sum(in_pages(w.nbytes + 2 * guard_bytes(w.nbytes)) for w in program.workspace)
                    if workspace + size > room[0]:
                        problem = (f"program for case '{case.name}': its workspace, {size} bytes, beside the other "
                                   f"cases' ({workspace} bytes: the worker keeps each case's while the kernel is "
                                   f"loaded) and the cases' own {room[1]} bytes is more than {GPU_FRACTION:.0%} "
                                   f"of the GPU memory ({room[2]} bytes)")
                    else:
                        workspace += size
            else:
                launch, problem = self._resolve_launch(candidate, case)
            result.cases.append(CaseResult(case.name, case.role, launch=launch))
            if problem:  # the candidate cannot serve this case; another variant will
                result.cases[-1].status, result.cases[-1].detail = Status.NOT_APPLICABLE, problem
                continue
            job = self._case_job(case, seed, launch)
            jobs.append(dataclasses.replace(job, program=program) if program else job)
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
        return _finish(result, t_start)

    def gpu_label(self) -> str:
        """The GPU this evaluator's worker runs on, for each attempt's record. Read from the
        worker already started (a dead one included): a label never restarts a worker."""
        if self._worker is None:
            return ""
        facts = self._worker.ready.facts
        return " ".join(p for p in (f"{self.ordinal}:", facts.name, facts.uuid) if p)

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
            jobs.append(self._case_job(case, seed, None))
        # torch.compile compiles on each case's first (validation) call: allow for it.
        self._setup_s = TORCH_COMPILE_S if kind == "torch_compile" else 0.0
        try:
            self._run(EvaluateBaseline(kind, b.bind, tuple(jobs), seed, self.timing, str(b.torch or "")), result)
        finally:
            self._setup_s = 0.0
        return _finish(result, t_start)

    def _deadline(self, step: Optional[Started]) -> float:
        """Seconds to wait for the worker's next reply, given the step it announced last
        (None: it is setting a case up, drawing inputs and uploading, and no kernel runs)."""
        if step is None:
            return CASE_SETUP_S
        if step.phase == Step.TIME:
            # At least 1 + 10 launches run however slow the kernel, each with a check behind it.
            per_launch = self._validate_s.get(step.case, 0.0)
            return self.kernel_timeout_s + 2.0 * self.timing.max_total_ms / 1e3 \
                + (11 + self.timing.repetitions) * per_launch
        return self.kernel_timeout_s + self._setup_s

    def _run(self, request: EvaluateKernel | EvaluateBaseline, result: EvaluationResult) -> None:
        """Send one request and fold the worker's replies into `result`."""
        if self._aborted:  # "stop now" arrived between two evaluations
            self._aborted = False
            raise EvaluationAborted("stopped by the user")
        worker = self.worker()
        worker.send(request)
        step: Optional[Started] = None  # what the worker announced and has not answered yet
        last_case = request.jobs[0].case if request.jobs else ""
        while True:
            deadline = self._deadline(step)
            try:
                reply = worker.recv(deadline)
            except (WorkerTimeout, WorkerDied) as e:
                if self._aborted:
                    self._aborted = False
                    worker.kill()
                    raise EvaluationAborted("stopped by the user") from None
                case, phase = (step.case, step.phase) if step else (last_case, "setup")
                if isinstance(e, WorkerDied):
                    self._mark(result, case, Status.CRASHED, f"case '{case}' ({phase}): {e}")
                    return
                worker.kill()
                what = "the kernel was killed (infinite loop or far too slow?)" if step else \
                    "the worker was killed while setting the case up"
                self._mark(result, case, Status.TIMEOUT, f"case '{case}' ({phase}): no answer within {deadline:.0f} s; {what}")
                return
            self.on_event(reply)
            if isinstance(reply, JobDone):
                return
            if isinstance(reply, Started):
                step, last_case = reply, reply.case
                continue
            step = None
            if isinstance(reply, CaseChecked):
                self._fold_check(result, reply)
            elif isinstance(reply, CaseTimed):
                c = result.case(reply.case)
                c.timing, c.clocks_mhz = TimingStats.of(reply.samples_ms), reply.clocks_mhz
                c.time_ms += reply.elapsed_ms  # a first chunk and then the full timing both took time
                c.samples_ms = tuple(reply.samples_ms)
            elif isinstance(reply, Fault):
                status = Status.LAUNCH_INVALID if reply.name in RECOVERABLE else Status.CRASHED
                self._mark(result, reply.case or last_case, status,
                           f"case '{reply.case}' ({reply.phase}): {reply.name}: {reply.text}")
                if reply.fatal:
                    worker.kill()
                    return

    def _fold_check(self, result: EvaluationResult, reply: CaseChecked) -> None:
        if not any(c.case == reply.case for c in result.cases):  # the sweep found another case's data changed
            self._mark(result, reply.case, reply.check.status, reply.check.detail)
            return
        c = result.case(reply.case)
        if reply.phase == "validate":
            c.check, c.validate_ms = reply.check, reply.elapsed_ms
            self._validate_s[reply.case] = reply.elapsed_ms / 1e3
            c.status = reply.check.status
            c.detail = c.detail or reply.check.detail
            return
        if reply.phase == "revalidate":
            c.recheck = reply.check
        if reply.check.status != Status.OK and c.status == Progress.PENDING:
            # Timed before any validation (the screen): the first check it met. Wrong in a
            # timed launch is a wrong answer here, not "unstable" (correct, then wrong).
            wrong = reply.check.status == Status.UNSTABLE
            c.status = Status.WRONG_ANSWER if wrong else reply.check.status
            c.detail = ("wrong in the screen's timed launches, before any validation: " if wrong else "") \
                + reply.check.detail
            return
        if reply.check.status == Status.OK or c.status != Status.OK:
            return
        # After the validation passed: wrong after the timing loop, in a timed launch, or found by the sweep.
        c.status = Status.UNSTABLE if reply.check.status == Status.WRONG_ANSWER else reply.check.status
        c.detail = reply.check.detail if reply.phase != "revalidate" else \
            "correct before the timing loop, wrong after it:\n" + reply.check.detail

    def _gate_floor(self, result: EvaluationResult) -> None:
        """A median faster than the speed-of-light floor is a hole in the harness, not a
        result: the case fails as ``below_floor``. Cold timing only (a hot L2 can beat
        the DRAM floor honestly); workloads without [metrics] have no floor."""
        ceilings = self.ceilings if self.timing.cold_l2 else None
        if ceilings is None:
            return
        for c in result.cases:
            if c.status != Status.OK or c.timing is None:
                continue
            floor = case_floor(self.workload, self.workload.case(c.case), ceilings, c.timing.median_ms)
            if floor is not None and floor.suspect:
                c.status = Status.BELOW_FLOOR
                c.detail = (f"median {c.timing.median_ms:.4f} ms is {floor.pct_of_floor:.0%} of the speed-of-light "
                            f"floor ({floor.floor_ms:.4f} ms, {floor.bound}-bound, {ceilings.source}): faster than "
                            "the hardware allows, so the timing or the validation was gamed; never a result")

    @staticmethod
    def _mark(result: EvaluationResult, case: str, status: Status, detail: str) -> None:
        for c in result.cases:
            if c.case == case:
                c.status, c.detail = status, detail
        if result.status in (Progress.PENDING, Status.OK):
            result.status, result.detail = status, detail


NOT_REVALIDATED = ("not revalidated after its timing: slower than the best and than every case's fastest median, "
                   "it could not be chosen (validated before the timing, every timed launch checked)")


def contender(result: EvaluationResult, best_ms: float, case_best_ms: Mapping[str, float]) -> bool:
    """Whether a timed result could be chosen: its score (the geomean of its performance
    medians) below the best's, or some case's median below that case's fastest so far
    (a case nobody has won yet counts as beaten)."""
    medians = _performance_medians(result)
    if medians is None:
        return True  # not every performance case timed: nothing to compare, revalidate
    return geomean(list(medians.values())) < best_ms or \
        any(ms < case_best_ms.get(case, float("inf")) for case, ms in medians.items())


def _performance_medians(result: EvaluationResult) -> Optional[dict[str, float]]:
    """Each performance case's median, once every one it applies to is timed."""
    medians = {c.case: c.timing.median_ms for c in result.cases if c.role == "performance" and c.timing}
    applies = sum(c.role == "performance" and c.status != Status.NOT_APPLICABLE for c in result.cases)
    if not medians or len(medians) < applies:
        return None
    return medians


def _passed(c: CaseResult) -> bool:
    """A case that passed, or one the candidate does not apply to (never run, never failed)."""
    return c.status in (Status.OK, Status.NOT_APPLICABLE)


def _screen_best(result: EvaluationResult, best_ms: float,
                 case_best_ms: Optional[Mapping[str, float]]) -> Optional[float]:
    """What the screen's geomean rule compares with. A candidate that does not apply to
    every performance case has no score comparable with the best's: its geomean is
    compared with that of the winners of the cases it does apply to (None, keep timing,
    where one of them has no winner), and the per-case rule decides as for any other."""
    if full_coverage(result):
        return best_ms
    cases = [c.case for c in result.cases if c.role == "performance" and c.status != Status.NOT_APPLICABLE]
    if case_best_ms is None or not cases or any(c not in case_best_ms for c in cases):
        return None
    return geomean([case_best_ms[c] for c in cases])


def coverage_problem(cases: list[CaseResult]) -> str:
    """Why a candidate that is not applicable to some cases cannot be judged at all, or ''
    (agent/spec/applicability.py's coverage_gap)."""
    skipped = [c for c in cases if c.status == Status.NOT_APPLICABLE]
    gap = coverage_gap(c.role for c in cases if c.status != Status.NOT_APPLICABLE) if skipped else None
    return f"{gap}; e.g. {skipped[0].detail}" if gap else ""


def full_coverage(result: EvaluationResult) -> bool:
    """Whether the candidate applies to every performance case (so it has a score)."""
    return not any(c.role == "performance" and c.status == Status.NOT_APPLICABLE for c in result.cases)


def _finish(result: EvaluationResult, t_start: float) -> EvaluationResult:
    """Overall status (the first failing case's), detail and score."""
    if result.status == Progress.PENDING:
        failed = [c for c in result.cases if c.status not in (Status.OK, Status.NOT_APPLICABLE)]
        if failed:
            result.status = failed[0].status if failed[0].status != Progress.PENDING else Status.CRASHED
            result.detail = f"case '{failed[0].case}': {failed[0].detail}"
        else:
            result.status = Status.OK
    medians = _performance_medians(result)
    if result.status == Status.OK and medians is not None and full_coverage(result):
        result.score_ms = geomean(list(medians.values()))
    result.wall_ms["validate"] = sum(c.validate_ms for c in result.cases)
    result.wall_ms["time"] = sum(c.time_ms for c in result.cases)
    result.wall_ms["total"] = (time.perf_counter() - t_start) * 1e3
    result.began_s = time.time() - result.wall_ms["total"] / 1e3
    return result
