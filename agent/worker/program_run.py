"""A candidate program on one case's buffers: its workspace, between guard bands,
and the native sequence of launches and memsets, built once per (kernel, case).

Workspace is filled with a fresh poison word (warpsmith.agent.worker.poison) before every run,
judged or timed, outside the timing events, so that a program that reads workspace it
never wrote fails. `init = "zero"` workspace is then zeroed by the program's own first
steps (one memset each), inside the events: zeroing a large scratch (histograms,
look-back flags) is work the kernel needs, and was once done free before the start
event. Guard bands are checked like the arrays'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Sequence

from ..runtime import native
from ..spec.launch import LaunchJob, ProgramJob
from .case_buffers import GUARD_WORD, CaseBuffers, guard_bytes
from .pages import alloc_pages
from .poison import Poisons
from .protocol import CaseCheck
from .status import Status

if TYPE_CHECKING:
    from .gpu_checks import Tally


class WorkspaceBuffer:
    def __init__(self, device: native.Device, name: str, dtype: str, nbytes: int, init: str):
        self.name, self.dtype, self.nbytes, self.init = name, dtype, nbytes, init
        self.guard = guard_bytes(nbytes)
        self.buffer = alloc_pages(device, nbytes + 2 * self.guard)

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + self.guard


class ProgramRun:
    def __init__(self, device: native.Device, bufs: CaseBuffers, job: ProgramJob,
                 function: Callable[[str], native.Function]):
        self.device, self.bufs = device, bufs
        self.workspace = {w.name: WorkspaceBuffer(device, w.name, w.dtype, w.nbytes, w.init) for w in job.workspace}
        self.program = native.Program()
        self.local_bytes = 0  # the largest local frame of its kernels (the local-memory scrub's size)
        for w in self.workspace.values():  # zeroed inside the timed sequence (above)
            if w.init == "zero":
                self.program.add_memset(w.ptr, w.nbytes, 0)
        for step in job.steps:
            if isinstance(step, LaunchJob):
                l = step.launch
                fn = function(step.entry)
                self.local_bytes = max(self.local_bytes, fn.info.local_bytes)
                self.program.add_launch(fn, l.grid, l.block, l.shared,
                                        [a.native(self._ptr) for a in step.args], l.cluster)
            else:
                target = self.workspace.get(step.target)
                nbytes = target.nbytes if target else bufs.arrays[step.target].nbytes
                self.program.add_memset(self._ptr(step.target), nbytes, 0)

    def _ptr(self, name: str) -> int:
        return self.workspace[name].ptr if name in self.workspace else self.bufs.arrays[name].ptr

    def prepare(self, poisons: Poisons) -> None:
        """Guards re-armed, workspace initialised: before a judged run."""
        for w in self.workspace.values():
            w.buffer.fill_u32(GUARD_WORD, 0, w.guard)
            w.buffer.fill_u32(GUARD_WORD, w.guard + w.nbytes, w.guard)
        self.init_workspace(poisons, synchronous=True)

    def init_workspace(self, poisons: Poisons, synchronous: bool = False) -> None:
        """Freshly poisoned, "zero" workspace too (the program zeroes it, timed);
        asynchronous inside timing loops (outside the events)."""
        for w in self.workspace.values():
            fill = w.buffer.fill_u32 if synchronous else w.buffer.fill_u32_async
            fill(poisons.word(w.dtype), w.guard, w.nbytes)

    def enqueue_overrun(self, tally: Tally) -> Callable[[Sequence[int]], Optional[CaseCheck]]:
        """The workspace's guard bands counted on `tally` (GpuChecks.tally, beside the case's
        own integrity checks); the function returned reads the counts: a write past a
        workspace buffer's ends, or None."""
        bands = [(f"workspace {w.name} ({side})", tally.count_not(w.buffer.ptr + off, GUARD_WORD, w.guard))
                 for w in self.workspace.values() for side, off in (("before", 0), ("after", w.guard + w.nbytes))]

        def read(results: Sequence[int]) -> Optional[CaseCheck]:
            hits = [name for name, k in bands if results[k]]
            if not hits:
                return None
            return CaseCheck(Status.OUT_OF_BOUNDS, detail="writes outside the buffers of " + ", ".join(hits)
                             + ": check the workspace size and the bounds of the last partial tile")
        return read
