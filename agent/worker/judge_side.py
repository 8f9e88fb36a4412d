"""The judge process: references, their keys and the comparison kernels in a CUDA context
of their own, which no candidate kernel can address.

The candidate's process (the GPU worker) holds the outputs; it shares each one with the
judge through CUDA IPC (agent/runtime/native.py: IpcMapping) and, after a launch, records
an interprocess event and asks for a check. The judge's stream waits on that event, so its
comparison reads what the launch wrote, never what was there before. A check on its own
is answered with its statistics; inside a timing run the judge only enqueues each launch's
checks and answers with an event of its own recorded behind them, which the worker's
stream waits on before it poisons the outputs for the next launch, and the run's counts
are read once at its end, from memory no candidate's context maps. The reference the
judge compares against is uploaded into the judge's context and masked there with the
judge's own key.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import numpy as np

from ..runtime import native
from ..runtime.parent_watch import exit_with_parent
from ..spec.workload import ARRAY_ITEMSIZE
from .gpu_checks import CloseStats, GpuChecks
from .pages import alloc_pages

if TYPE_CHECKING:
    from multiprocessing.connection import Connection


@dataclass(frozen=True)
class ShareOutput:
    """An output of the worker's, for the judge to map and compare from now on."""
    key: str
    memory: bytes  # the IPC handle of the allocation holding it
    allocation_bytes: int
    offset: int  # of the output's first element in the allocation
    dtype: str
    count: int  # elements
    scale_row: int  # elements per tolerance scale (agent/spec/tolerance.py)
    rtol: float
    reference: np.ndarray  # float64 values then scales, or the output's integer dtype


@dataclass(frozen=True)
class CheckOutput:
    """Compare `key` once the worker's last record of `event` has completed."""
    key: str
    event: bytes


@dataclass(frozen=True)
class StartRun:
    """A timing run of `launches` launches, each checked on `keys`: its counts zeroed."""
    keys: tuple[str, ...]
    launches: int


@dataclass(frozen=True)
class EnqueueChecks:
    """Launch `launch` of the run: compare its outputs once the worker's last record of
    `event` has completed, without waiting for the result (ReadRun reads them all)."""
    event: bytes
    launch: int


@dataclass(frozen=True)
class ReadRun:
    pass


@dataclass(frozen=True)
class Stop:
    pass


JudgeRequest = Union[ShareOutput, CheckOutput, StartRun, EnqueueChecks, ReadRun, Stop]


@dataclass(frozen=True)
class JudgeReady:
    pass


@dataclass(frozen=True)
class Ack:
    """A request without an answer of its own was carried out."""


@dataclass(frozen=True)
class Checked:
    key: str
    stats: CloseStats


@dataclass(frozen=True)
class Enqueued:
    done: bytes  # the judge's event, recorded behind the checks just enqueued: the worker's stream waits on it


@dataclass(frozen=True)
class RunCounts:
    mismatches: tuple[tuple[int, ...], ...]  # per launch of the run, per key


@dataclass(frozen=True)
class JudgeFault:
    name: str  # the CUDA error's name, or the exception's type
    text: str


JudgeReply = Union[JudgeReady, Ack, Checked, Enqueued, RunCounts, JudgeFault]


@dataclass
class _Output:
    mapping: native.IpcMapping
    job: ShareOutput
    reference: native.Buffer


class Judge:
    def __init__(self, ordinal: int):
        self.device = native.open_device(ordinal)
        self.checks = GpuChecks(self.device, self.device.facts.arch)
        self.outputs: dict[str, _Output] = {}
        self.events: dict[bytes, native.IpcEvent] = {}  # by handle: opened once each
        self.done = native.IpcEvent(self.device)  # recorded behind each launch's enqueued checks
        self.done_handle = self.done.handle()
        self.run: tuple[tuple[str, ...], int] = ((), 0)  # the timing run's keys and launches
        self.slots: native.Buffer | None = None  # its checks' stats, a slot per launch and key

    def share(self, job: ShareOutput) -> Ack:
        mapping = native.IpcMapping(self.device, job.memory, job.allocation_bytes)
        reference = alloc_pages(self.device, job.reference.nbytes)
        self.checks.upload_reference(reference, job.reference)
        self.outputs[job.key] = _Output(mapping, job, reference)
        return Ack()

    def _after(self, event: bytes) -> None:
        """This context's stream waits for the worker's last record of `event`."""
        if event not in self.events:
            self.events[event] = native.IpcEvent(self.device, event)
        self.events[event].wait()

    def check(self, req: CheckOutput) -> Checked:
        out = self.outputs[req.key]
        self._after(req.event)
        ptr, job = out.mapping.ptr + out.job.offset, out.job
        stats = self.checks.close(job.dtype, ptr, out.reference.ptr, job.count, job.scale_row, job.rtol)
        return Checked(req.key, stats)

    def start_run(self, req: StartRun) -> Ack:
        self.run = (req.keys, req.launches)
        self.slots = alloc_pages(self.device, max(1, req.launches * len(req.keys)) * self.checks.slot_words * 8)
        self.slots.fill_u32(0, 0, self.slots.nbytes)
        return Ack()

    def enqueue(self, req: EnqueueChecks) -> Enqueued:
        keys, launches = self.run
        if self.slots is None or not 0 <= req.launch < launches:
            raise ValueError(f"launch {req.launch} is outside the run's {launches}")
        self._after(req.event)
        with self.checks.keys.on():
            for j, key in enumerate(keys):
                out = self.outputs[key]
                slot = self.slots.ptr + (req.launch * len(keys) + j) * self.checks.slot_words * 8
                self.checks.enqueue_output_check(out.job.dtype, out.mapping.ptr + out.job.offset, out.reference.ptr,
                                                 out.job.count * ARRAY_ITEMSIZE[out.job.dtype], out.job.scale_row,
                                                 out.job.rtol, slot)
        self.done.record()
        return Enqueued(self.done_handle)

    def read_run(self) -> RunCounts:
        keys, launches = self.run
        if self.slots is None or not keys:
            return RunCounts(())
        stats = np.empty(launches * len(keys) * self.checks.slot_words, dtype=np.uint64)
        self.slots.download(stats)  # after a wait for this context's stream
        counts = stats.reshape(launches, len(keys), self.checks.slot_words)[:, :, 0]
        return RunCounts(tuple(tuple(int(c) for c in row) for row in counts))


def judge_main(conn: Connection, ordinal: int, parent_pid: int) -> None:
    """Entry point of the judge process; it dies with the process that started it (the
    evaluator's, beside the worker: agent/worker/judge.py), and stops when the worker's end
    of its pipe closes."""
    exit_with_parent(parent_pid)
    os.dup2(2, 1)
    try:
        judge = Judge(ordinal)
    except Exception as e:
        conn.send(JudgeFault(getattr(e, "name", type(e).__name__), str(getattr(e, "text", e))))
        return
    conn.send(JudgeReady())
    while True:
        try:
            req: JudgeRequest = conn.recv()
        except EOFError:
            return
        if isinstance(req, Stop):
            return
        try:
            if isinstance(req, ShareOutput):
                conn.send(judge.share(req))
            elif isinstance(req, CheckOutput):
                conn.send(judge.check(req))
            elif isinstance(req, StartRun):
                conn.send(judge.start_run(req))
            elif isinstance(req, EnqueueChecks):
                conn.send(judge.enqueue(req))
            elif isinstance(req, ReadRun):
                conn.send(judge.read_run())
        except native.CudaError as e:
            conn.send(JudgeFault(e.name, e.text))
        except Exception as e:
            print(traceback.format_exc(limit=4), file=sys.stderr, flush=True)
            conn.send(JudgeFault(type(e).__name__, str(e)))
