"""The judge process: references, their keys and the comparison kernels in a CUDA context
of their own, which no candidate kernel can address.

The candidate's process (the GPU worker) holds the outputs; it shares each one with the
judge through CUDA IPC (agent/runtime/native.py: IpcMapping) and, after a launch, records
an interprocess event and asks for a check. The judge's stream waits on that event, so its
comparison reads what the launch wrote, never what was there before; it answers with the
comparison's statistics once they are in. The reference the judge compares against is
uploaded into the judge's context and masked there with the judge's own key.
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
from .gpu_checks import CLOSE_KERNELS, CloseStats, GpuChecks
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
class Forget:
    key: str


@dataclass(frozen=True)
class Stop:
    pass


JudgeRequest = Union[ShareOutput, CheckOutput, Forget, Stop]


@dataclass(frozen=True)
class JudgeReady:
    pass


@dataclass(frozen=True)
class Shared:
    key: str


@dataclass(frozen=True)
class Checked:
    key: str
    stats: CloseStats


@dataclass(frozen=True)
class JudgeFault:
    name: str  # the CUDA error's name, or the exception's type
    text: str


JudgeReply = Union[JudgeReady, Shared, Checked, JudgeFault]


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

    def share(self, job: ShareOutput) -> Shared:
        mapping = native.IpcMapping(self.device, job.memory, job.allocation_bytes)
        reference = alloc_pages(self.device, job.reference.nbytes)
        self.checks.upload_reference(reference, job.reference)
        self.outputs[job.key] = _Output(mapping, job, reference)
        return Shared(job.key)

    def check(self, req: CheckOutput) -> Checked:
        out = self.outputs[req.key]
        if req.event not in self.events:
            self.events[req.event] = native.IpcEvent(self.device, req.event)
        self.events[req.event].wait()
        ptr, job = out.mapping.ptr + out.job.offset, out.job
        if job.dtype in CLOSE_KERNELS:
            stats = self.checks.close(job.dtype, ptr, out.reference.ptr, job.count, job.scale_row, job.rtol)
        else:
            bad = self.checks.count_differ_ref(ptr, out.reference.ptr, job.count * job.reference.itemsize)
            stats = CloseStats(bad, 0.0, 0.0, -1, 0)
        return Checked(req.key, stats)


def judge_main(conn: Connection, ordinal: int, parent_pid: int) -> None:
    """Entry point of the judge process; it dies with the worker that started it."""
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
            elif isinstance(req, Forget):
                judge.outputs.pop(req.key, None)
        except native.CudaError as e:
            conn.send(JudgeFault(e.name, e.text))
        except Exception as e:
            print(traceback.format_exc(limit=4), file=sys.stderr, flush=True)
            conn.send(JudgeFault(type(e).__name__, str(e)))
