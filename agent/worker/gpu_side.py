"""The GPU worker process: owns the CUDA context, the case buffers and the checks.

A kernel that faults kills the context, and a kernel that hangs never returns;
both cost only this process. The evaluator kills and restarts it and the
session goes on.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from ..runtime import l2_flush, native
from ..runtime.device_facts import DeviceFacts
from ..runtime.parent_watch import exit_with_parent
from .case_buffers import CaseBuffers
from .case_verdicts import integrity_verdict, library_check
from .ceilings_probe import ensure_ceilings
from .clocks import Clocks
from .fences import Fence, Region, regions
from .gpu_checks import GpuChecks
from .judge import JudgeClient
from .judged_timing import JudgedTimedChecks, share_outputs
from .output_checks import compare_outputs
from .poison import Poisons
from .program_run import ProgramRun
from .protocol import (
    CaseCheck,
    CaseChecked,
    CaseJob,
    CaseTimed,
    EvaluateBaseline,
    EvaluateKernel,
    Fault,
    JobDone,
    ProgramJob,
    Send,
    Shutdown,
    Started,
    Step,
    TimingConfig,
    WorkerReady,
)
from .status import Status
from .timed_checks import TimedChecks
from .torch_baseline import TorchBaseline, is_torch_kind, torch_function

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    # A library baseline on one case: one call that fills the outputs, and its timing (a hook before each call)
    TimeIt = Callable[[native.TimingSettings, Callable[[int], None]], native.TimingResult]
    BaselineCalls = Callable[[CaseJob, CaseBuffers], tuple[Callable[[], None], TimeIt]]

# Launch-time refusals: the context survives them, so the worker does too.
RECOVERABLE = {"CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
               "CUDA_ERROR_NOT_FOUND", "CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_NO_BINARY_FOR_GPU",
               "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_OUT_OF_MEMORY"}

# What a fault most likely was, for the proposer (after the driver's own text).
FAULT_HINTS = {"CUDA_ERROR_ILLEGAL_ADDRESS": "a load or store outside the memory the kernel was given, or a store "
                                             "into an input (inputs are read-only for kernels)"}

BIAS_RELU_SOURCE = (Path(__file__).with_name("cuda") / "bias_relu.cu").read_text()


class GpuWorker:
    def __init__(self, ordinal: int, judge: Optional[Connection] = None):
        self.device = native.open_device(ordinal)
        l2_flush.install(self.device)
        self.checks = GpuChecks(self.device, self.device.facts.arch)
        # With a judge (its pipe), the outputs are compared in the judge process's own context
        # (agent/worker/judge_side.py); the integrity checks stay here for now.
        self.judge = JudgeClient(self.device, judge) if judge is not None else None
        for short in self.checks.holds_short:  # in the worker's log: the scrubs missed some slots
            print(f"warpsmith: a shared, local or register scrub could not hold every slot at once ({short}): "
                  "is another process using this GPU? Stashes between launches may go unscrubbed.",
                  file=sys.stderr, flush=True)
        self.cases: dict[tuple[str, int, str], CaseBuffers] = {}
        self._cublas: native.Cublas | None = None
        self._bias_relu: native.Function | None = None
        self.clocks = Clocks(self.device.facts.uuid)
        self._torch: dict[tuple[str, str], TorchBaseline] = {}  # by (kind, source)
        self.poisons = Poisons()
        self.phase, self.case = "start", ""
        # (cubin, symbol, module, function) loaded last, and its programs per (case, seed, steps)
        self._kernel: tuple[bytes, str, native.Module, native.Function] | None = None
        self._programs: dict[tuple[str, int, Optional[ProgramJob]], ProgramRun] = {}

    def facts(self) -> DeviceFacts:
        return native.device_facts(self.device)

    def buffers(self, job: CaseJob, seed: int) -> CaseBuffers:
        key = (job.case, seed, job.reference)
        if key not in self.cases:
            self.cases[key] = CaseBuffers(self.device, job, seed, self.checks, on_device=self.judge is None)
            if self.judge is not None:
                share_outputs(self.judge, self.cases[key], seed)
        return self.cases[key]

    def check(self, bufs: CaseBuffers, seed: int) -> CaseCheck:
        """Guards, inputs and references, then outputs: the first kind of failure found wins."""
        return self.integrity(bufs) or self.check_outputs(bufs, seed)

    def integrity(self, bufs: CaseBuffers, run: Optional[ProgramRun] = None) -> Optional[CaseCheck]:
        """What a kernel must leave alone: the guard bands, the moats, its inputs, the
        reference, and a program's workspace guard bands; checked together, after the
        launch (stream order), with one wait."""
        tally = self.checks.tally()
        read = bufs.enqueue_integrity(tally)
        read_workspace = run.enqueue_overrun(tally) if run else None
        results = tally.read()
        return integrity_verdict(bufs, read(results)) or (read_workspace(results) if read_workspace else None)

    def check_outputs(self, bufs: CaseBuffers, seed: int) -> CaseCheck:
        return compare_outputs(self.checks, self.judge, bufs, seed)

    def kernel(self, cubin: bytes, symbol: str, send: Send) -> native.Function:
        """The function of `cubin`, loaded once: the validate and the time requests of an
        attempt carry the same CUBIN, and the second finds it loaded."""
        if self._kernel is None or self._kernel[:2] != (cubin, symbol):
            self.phase, self.case = Step.LOAD, ""
            send(Started("", Step.LOAD))
            self._kernel, self._programs = None, {}  # the old module goes with its last reference
            module = self.device.load_module(cubin)
            self._kernel = (cubin, symbol, module, module.function(symbol))
        return self._kernel[3]

    def fence(self, bufs: CaseBuffers, run: Optional[ProgramRun], flushed: bool = True) -> Fence:
        """Every other case's buffers and workspace and every moat fenced for this run
        (agent/worker/fences.py), and the worker's own memory a kernel could keep data in:
        cuBLAS's workspace once a baseline opened cuBLAS, and the L2 flush buffer when the
        run does not flush (`--hot`: nothing else writes it between launches)."""
        own = []
        if self._cublas is not None:
            own.append(Region("cuBLAS's workspace", self._cublas.workspace_ptr, self._cublas.workspace_bytes))
        if not flushed:
            own.append(Region("the L2 flush buffer", self.device.flush_ptr, self.device.flush_bytes))
        fence = Fence(self.checks, regions(bufs, run, self.cases.values(), self._programs.values()) + own)
        fence.raise_()
        return fence

    def program(self, job: CaseJob, seed: int, bufs: CaseBuffers) -> ProgramRun:
        """The job's program on its buffers, built once while its kernel stays loaded."""
        key = (job.case, seed, job.program)
        if key not in self._programs:
            assert self._kernel is not None and job.program is not None  # a program's job, its kernel loaded
            module = self._kernel[2]
            self._programs[key] = ProgramRun(self.device, bufs, job.program, module.function)
        return self._programs[key]

    def run_kernel(self, req: EvaluateKernel, send: Send) -> None:
        fn = self.kernel(req.cubin, req.symbol, send)

        def local_bytes(run: Optional[ProgramRun]) -> int:
            """The largest local frame the launch (or the program's launches) runs with."""
            return run.local_bytes if run else fn.info.local_bytes

        def validate(job: CaseJob, phase: str) -> CaseCheck:
            self.phase, self.case = phase, job.case
            t0 = time.perf_counter()
            bufs = self.buffers(job, req.seed)
            bufs.prepare(self.poisons)
            run = self.program(job, req.seed, bufs) if job.program else None
            if run:
                run.prepare(self.poisons)
            # No fence here (agent/worker/fences.py: only timed runs need one).
            self.checks.scrub(local_bytes(run))
            send(Started(job.case, phase))  # setup is over: from here the kernel's deadline runs
            if run:
                self.device.run(run.program)
            else:
                l = job.launch
                assert l is not None  # a kernel's job without a program has its launch
                self.device.launch(fn, l.grid, l.block, l.shared, bufs.kernel_args())
            result = self.integrity(bufs, run) or self.check_outputs(bufs, req.seed)
            send(CaseChecked(job.case, phase, result, (time.perf_counter() - t0) * 1e3))
            return result

        def timed(job: CaseJob) -> bool:
            self.phase, self.case = Step.TIME, job.case
            t0, before = time.perf_counter(), self.clocks.read()
            bufs = self.buffers(job, req.seed)
            bufs.prepare(self.poisons)
            run = self.program(job, req.seed, bufs) if job.program else None
            judge: TimedChecks | JudgedTimedChecks
            if self.judge is not None:
                judge = JudgedTimedChecks(self.checks, bufs, req.seed, self.poisons, req.timing.repetitions,
                                          self.judge, local_bytes(run), run)
            else:
                judge = TimedChecks(self.device, self.checks, bufs, self.poisons, req.timing.repetitions,
                                    local_bytes(run), run)
            if run:
                run.prepare(self.poisons)
            fence = self.fence(bufs, run, flushed=req.timing.cold_l2)
            send(Started(job.case, Step.TIME))
            with fence.lowered_on_error():
                if run:
                    timing = self.device.time_program(run.program, _settings(req.timing), before=judge.before,
                                                      after=judge.after)
                else:
                    l = job.launch
                    assert l is not None  # a kernel's job without a program has its launch
                    timing = self.device.time(fn, l.grid, l.block, l.shared, bufs.kernel_args(),
                                              _settings(req.timing), before=judge.before, after=judge.after)
            send(self.case_timed(job.case, timing, t0, before))
            verdict = fence.breached() or self.integrity(bufs, run) \
                or judge.verdict(len(timing.samples_ms))
            if verdict is not None:
                send(CaseChecked(job.case, Step.TIME, verdict, (time.perf_counter() - t0) * 1e3))
            return verdict is None

        def steps() -> None:
            # Each step runs on every case (a list, not a generator: no short cut), and a
            # failure anywhere ends the request before the next step.
            if Step.VALIDATE in req.steps and not all([validate(job, Step.VALIDATE).status == Status.OK
                                                        for job in req.jobs]):
                return
            if Step.TIME in req.steps and not all([timed(job) for job in req.jobs if job.timed]):
                return
            if Step.REVALIDATE in req.steps:
                for job in req.jobs:
                    validate(job, Step.REVALIDATE)

        steps()
        # After every way out but a CUDA error: a faulted context is dead, and the worker restarts anyway.
        self.sweep(send)

    def sweep(self, send: Send) -> None:
        """After a candidate: every resident case's moats, inputs and references as
        uploaded, checked together with one wait. A kernel may write far past its own
        buffers; whatever it changed is reported against it and restored before the next
        candidate. (Guard bands are left to each case's next prepare, which re-arms them.)"""
        self.phase, self.case = "integrity", ""
        tally = self.checks.tally()
        reads = [(bufs, bufs.enqueue_integrity(tally, guards=False)) for bufs in self.cases.values()]
        results = tally.read()
        for bufs, read in reads:
            self.case = bufs.job.case
            found = integrity_verdict(bufs, read(results))
            if found is not None:
                send(CaseChecked(bufs.job.case, "integrity", found, 0.0))
            bufs.restore()

    def cublas(self) -> native.Cublas:
        if self._cublas is None:
            self._cublas = native.open_cublas(self.device)
        return self._cublas

    def bias_relu(self) -> native.Function:
        """C = max(C + bias[col], 0), grid-stride: the epilogue an unfused cuBLAS user launches."""
        if self._bias_relu is None:
            from ..runtime.compiler import compile_kernel
            compiled = compile_kernel(BIAS_RELU_SOURCE, "ws_bias_relu", self.device.facts.arch)
            if not compiled.ok:
                raise RuntimeError(f"bias+ReLU epilogue did not compile: {compiled.error}\n{compiled.log}")
            self._bias_relu = self.device.load_module(compiled.cubin).function(compiled.symbol)
        return self._bias_relu

    def run_baseline(self, req: EvaluateBaseline, send: Send) -> None:
        """Every library baseline through one loop: validate each case like a kernel, then time it."""
        if is_torch_kind(req.kind):
            calls = self._torch_calls(req)
        elif req.kind in ("cublas_sgemm", "cublas_sgemm_bias_relu", "cublas_gemm_bf16"):
            calls = self._cublas_calls(req)
        else:
            raise ValueError(f"unknown baseline {req.kind}")
        for job in req.jobs:
            self.phase, self.case = "validate", job.case
            t0 = time.perf_counter()
            bufs = self.buffers(job, req.seed)
            bufs.prepare(self.poisons)
            run, time_it = calls(job, bufs)
            send(Started(job.case, "validate"))
            check = library_check(run, lambda: self.check(bufs, req.seed))
            send(CaseChecked(job.case, "validate", check, (time.perf_counter() - t0) * 1e3))
            if job.timed and check.status != Status.NOT_APPLICABLE:
                self.phase = "time"
                t0, before = time.perf_counter(), self.clocks.read()
                send(Started(job.case, "time"))
                # The same poisoned outputs before every timed call as a candidate gets.
                poison = lambda index: bufs.poison(self.poisons)
                send(self.case_timed(job.case, time_it(_settings(req.timing), poison), t0, before))
        if is_torch_kind(req.kind):
            self._torch[(req.kind, req.torch_source)].release_cached_memory()

    def _cublas_calls(self, req: EvaluateBaseline) -> BaselineCalls:
        """Per case: (one call that fills the outputs, the timing of it) for cuBLAS [+ epilogue]."""
        blas, b = self.cublas(), req.bind
        epilogue = self.bias_relu() if req.kind == "cublas_sgemm_bias_relu" else None

        def calls(job: CaseJob, bufs: CaseBuffers) -> tuple[Callable[[], None], TimeIt]:
            ptr: Callable[[str], int] = lambda name: bufs.arrays[name].ptr
            m, n, k = (int(job.scalars[b[x]]) for x in ("m", "n", "k"))
            operands = (ptr(b["a"]), ptr(b["b"]), ptr(b["c"]), m, n, k)
            if req.kind == "cublas_gemm_bf16":  # bf16 operands, fp32 compute (cublasGemmEx)
                return (lambda: blas.gemm_bf16(self.device, *operands),
                        lambda settings, before: blas.time_gemm_bf16(self.device, *operands, settings, before=before))
            if epilogue is None:
                return (lambda: blas.sgemm(self.device, *operands),
                        lambda settings, before: blas.time_sgemm(self.device, *operands, settings, before=before))
            # The library's GEMM, then the epilogue as its own launch: what a user without fusion gets.
            count = m * n
            epi_args = [("ptr", ptr(b["c"])), ("ptr", ptr(b["bias"])), ("i64", count), ("i32", n)]
            grid = (min((count + 255) // 256, 65535 * 16), 1, 1)
            def run() -> None:
                blas.sgemm(self.device, *operands)
                self.device.launch(epilogue, grid, (256, 1, 1), 0, epi_args)
            return run, lambda settings, before: self.device.time_callable(run, settings, before=before)
        return calls

    def _torch_calls(self, req: EvaluateBaseline) -> BaselineCalls:
        """Per case: (one call copied into the outputs, the timing of one eager/compiled call)."""
        key = (req.kind, req.torch_source)
        if key not in self._torch:
            self._torch[key] = TorchBaseline(self.device, req.torch_source, req.kind == "torch_compile",
                                             torch_function(req.kind))
        tb = self._torch[key]
        return lambda job, bufs: (lambda: tb.run_into_outputs(bufs, job.scalars),
                                  lambda settings, before: self.device.time_callable(tb.timer(bufs, job.scalars),
                                                                                     settings, before=before))

    def case_timed(self, case: str, timing: native.TimingResult, t0: float,
                   before: Optional[tuple[int, int]]) -> CaseTimed:
        """The samples, with the clocks read before and after them."""
        after = self.clocks.read()
        clocks = tuple(before) + tuple(after) if before and after else ()
        return CaseTimed(case, tuple(timing.samples_ms), timing.warmup_mean_ms, (time.perf_counter() - t0) * 1e3, clocks)


def _settings(t: TimingConfig) -> native.TimingSettings:
    return native.TimingSettings(warmup=t.warmup, repetitions=t.repetitions, flush_l2=t.cold_l2,
                                 max_total_ms=t.max_total_ms, min_repetitions=t.min_repetitions,
                                 warmup_share=t.warmup_share)


def worker_main(conn: Connection, ordinal: int, log_path: str | None = None, parent_pid: int | None = None,
                judge: Connection | None = None) -> None:
    """Entry point of the worker process. With a log path, its stdout and stderr
    (driver messages, warnings) go there instead of the terminal an app draws on;
    without one, its stdout goes to stderr, so a command's stdout carries only what the
    command prints (`bench --json`'s JSON). It dies with its parent (`parent_pid`),
    even inside a hung kernel."""
    exit_with_parent(parent_pid)
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    else:
        os.dup2(2, 1)
    try:
        worker = GpuWorker(ordinal, judge)
        facts = worker.facts()
    except Exception as e:  # no GPU, no driver, bad NVRTC: say so and stop
        conn.send(Fault("", "start", getattr(e, "name", type(e).__name__), str(getattr(e, "text", e)), True))
        return
    try:
        ceilings = ensure_ceilings(worker.device, facts)
    except Exception as e:  # the % of floor falls back to datasheet figures; evaluation goes on
        print(f"warpsmith: ceiling probe failed: {getattr(e, 'name', type(e).__name__)}: {e}", file=sys.stderr,
              flush=True)
        ceilings = None
    conn.send(WorkerReady(facts, native.nvrtc_version(), ceilings))
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if isinstance(req, Shutdown):
            return
        try:
            if isinstance(req, EvaluateKernel):
                worker.run_kernel(req, conn.send)
            elif isinstance(req, EvaluateBaseline):
                worker.run_baseline(req, conn.send)
            conn.send(JobDone())
        except native.CudaError as e:
            fatal = e.name not in RECOVERABLE
            hint = FAULT_HINTS.get(e.name)
            conn.send(Fault(worker.case, worker.phase, e.name, f"{e.text} ({hint})" if hint else e.text, fatal))
            if fatal:
                conn.close()
                os._exit(3)  # skip destructors: the context is dead
            conn.send(JobDone())
        except Exception as e:
            conn.send(Fault(worker.case, worker.phase, type(e).__name__,
                            f"{e}\n{traceback.format_exc(limit=4)}", True))
            conn.close()
            os._exit(4)
