"""The evaluator's line to one GPU's worker process: started on first use, restarted
after a crash or a hang (the candidate is then ``crashed`` / ``timeout``), killed on
abort; each request sent, and the replies folded into the attempt's result within the
deadlines (agent/evaluate/deadlines.py), each passed on to the sink of the call that sent it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from ..runtime.device_facts import DeviceFacts
from ..spec.speed_of_light import Ceilings, load_ceilings
from ..worker.gpu_side import RECOVERABLE
from ..worker.process import WorkerDied, WorkerProcess, WorkerTimeout
from ..worker.protocol import (
    CaseChecked,
    CaseTimed,
    EvaluateBaseline,
    EvaluateKernel,
    Fault,
    JobDone,
    Started,
    Step,
    TimingConfig,
)
from .attempt import EventSink
from .deadlines import Deadlines
from .reply_folding import fold_check, fold_timed, mark
from .results import EvaluationResult, Status


class EvaluationAborted(RuntimeError):
    """abort() was called: the GPU work in flight was killed on purpose ("stop now")."""


class WorkerChannel:
    def __init__(self, ordinal: int, timing: TimingConfig, kernel_timeout_s: float, worker_log: Optional[Path] = None,
                 separate_judge: bool = False):
        self.ordinal, self.separate_judge = ordinal, separate_judge
        self.worker_log = worker_log
        self._worker: Optional[WorkerProcess] = None
        # The GPU's facts, from the first worker's hello: a restarted worker opens the same
        # GPU. Read per case for every candidate (case_requests.device_problem), so not through
        # worker(), whose lock and liveness check the thread feeding the GPU paid each time.
        self._facts: Optional[DeviceFacts] = None
        self.restarts = 0
        self._aborted = False
        self.deadlines = Deadlines(timing, kernel_timeout_s)
        # worker() runs outside the scheduler's lock (agent/evaluate/ahead.py: the first facts
        # read, a compile's arch): after a crash the ahead thread and the graph's thread may both
        # find the worker dead, and each would start one (the other orphaned, holding a CUDA
        # context and every case's buffers).
        self._restart = threading.Lock()

    def worker(self) -> WorkerProcess:
        with self._restart:
            if self._worker is None or not self._worker.alive:
                if self._worker is not None:
                    self._worker.kill()
                    self.restarts += 1
                self._worker = WorkerProcess(self.ordinal, log_path=self.worker_log, separate_judge=self.separate_judge)
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

    def gpu_label(self) -> str:
        """The GPU this evaluator's worker runs on, for each attempt's record. Read from the
        worker already started (a dead one included): a label never restarts a worker."""
        if self._worker is None:
            return ""
        facts = self._worker.ready.facts
        return " ".join(p for p in (f"{self.ordinal}:", facts.name, facts.uuid) if p)

    def _run(self, request: EvaluateKernel | EvaluateBaseline, result: EvaluationResult, on_event: EventSink) -> None:
        """Send one request and fold the worker's replies into `result`, each passed to `on_event` as it arrives."""
        if self._aborted:  # "stop now" arrived between two evaluations
            self._aborted = False
            raise EvaluationAborted("stopped by the user")
        worker = self.worker()
        worker.send(request)
        step: Optional[Started] = None  # what the worker announced and has not answered yet
        last_case = request.jobs[0].case if request.jobs else ""
        while True:
            deadline = self.deadlines.after(step)
            try:
                reply = worker.recv(deadline)
            except (WorkerTimeout, WorkerDied) as e:
                if self._aborted:
                    self._aborted = False
                    worker.kill()
                    raise EvaluationAborted("stopped by the user") from None
                case, phase = (step.case or last_case, step.phase) if step else (last_case, "setup")
                if isinstance(e, WorkerDied):
                    mark(result, case, Status.CRASHED, f"case '{case}' ({phase}): {e}")
                    return
                worker.kill()
                what = "the kernel was killed (infinite loop or far too slow?)" if step and step.phase != Step.LOAD \
                    else "the worker was killed while setting the case up"
                mark(result, case, Status.TIMEOUT, f"case '{case}' ({phase}): no answer within {deadline:.0f} s; {what}")
                return
            on_event(reply)
            if isinstance(reply, JobDone):
                return
            if isinstance(reply, Started):
                step, last_case = reply, reply.case or last_case  # LOAD names no case: the first job's comes next
                continue
            step = None
            if isinstance(reply, CaseChecked):
                fold_check(result, reply, self.deadlines)
            elif isinstance(reply, CaseTimed):
                fold_timed(result, reply)
            elif isinstance(reply, Fault):
                status = Status.LAUNCH_INVALID if reply.name in RECOVERABLE else Status.CRASHED
                mark(result, reply.case or last_case, status,
                           f"case '{reply.case}' ({reply.phase}): {reply.name}: {reply.text}")
                if reply.fatal:
                    worker.kill()
                    return
