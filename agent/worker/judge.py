"""The GPU worker's handle on its judge (agent/worker/judge_side.py): a spawned process
with a CUDA context of its own, asked through a pipe, ordered after the worker's launches
by an interprocess event.

The judge is the worker's sibling, not its child: whoever starts the worker starts the
judge beside it (start_judge) and hands the worker its end of the judge's pipe. Both are
then daemons of that process and die with it; a worker that starts children could not be
a daemon, and would hold its parent's exit."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from ..runtime import native
from ..runtime.parent_watch import start_child
from .gpu_checks import CloseStats
from .judge_side import (
    Ack,
    Checked,
    CheckOutput,
    EnqueueChecks,
    Enqueued,
    JudgeFault,
    JudgeReady,
    JudgeReply,
    JudgeRequest,
    ReadRun,
    RunCounts,
    ShareOutput,
    StartRun,
    Stop,
    judge_main,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from ..runtime.native import Buffer, Device


class JudgeFailed(RuntimeError):
    """The judge did not start, did not answer in time, or failed a request."""


def start_judge(ordinal: int) -> tuple[BaseProcess, Connection]:
    """A judge process for GPU `ordinal`, a daemon of this process, and the worker's end of
    its pipe (for JudgeClient, in the worker)."""
    ctx = mp.get_context("spawn")  # a forked CUDA context is unusable
    worker_end, judge_end = ctx.Pipe()
    process = ctx.Process(target=judge_main, args=(judge_end, ordinal, os.getpid()), daemon=True,
                          name="warpsmith-judge")
    start_child(process)
    judge_end.close()
    return process, worker_end


class JudgeClient:
    def __init__(self, device: Device, conn: Connection, start_timeout_s: float = 120.0):
        self._conn = conn
        reply = self._recv(start_timeout_s)
        if not isinstance(reply, JudgeReady):
            self.close()
            raise JudgeFailed(f"the judge did not start: {self._text(reply)}")
        self._device = device
        self._launched = native.IpcEvent(device)  # recorded behind each launch the judge checks
        self._launched_handle = self._launched.handle()
        self._checked: native.IpcEvent | None = None  # the judge's, recorded behind a launch's enqueued checks

    def share_output(self, key: str, buffer: Buffer, offset: int, dtype: str, count: int, scale_row: int,
                     rtol: float, reference: np.ndarray, timeout_s: float = 120.0) -> None:
        """Map an output (`count` elements of `dtype` at `offset` in `buffer`) into the judge,
        with the reference it is compared against (float64 values then scales, or the
        output's integer dtype) and its tolerance."""
        memory = native.ipc_memory_handle(self._device, buffer)
        self._ask(ShareOutput(key, memory, buffer.nbytes, offset, dtype, count, scale_row, rtol,
                              np.ascontiguousarray(reference)), Ack, timeout_s)

    def check(self, key: str, timeout_s: float) -> CloseStats:
        """The output `key` against its reference, after everything enqueued on the worker's
        stream so far (the judge's stream waits on an event recorded now). When this returns
        the judge has read the output: the worker may overwrite it."""
        self._launched.record()
        reply = self._ask(CheckOutput(key, self._launched_handle), Checked, timeout_s)
        assert isinstance(reply, Checked)
        return reply.stats

    def start_run(self, keys: tuple[str, ...], launches: int, timeout_s: float = 60.0) -> None:
        """A timing run of `launches` launches whose outputs `keys` are each checked."""
        self._ask(StartRun(keys, launches), Ack, timeout_s)

    def enqueue_checks(self, launch: int, timeout_s: float) -> None:
        """Behind launch `launch` of the run: the judge enqueues its checks after everything
        enqueued on the worker's stream so far, and the worker's stream waits for them
        before whatever is enqueued next (the next launch's poison). The host waits only
        for the judge to have enqueued them, not for the GPU."""
        self._launched.record()
        reply = self._ask(EnqueueChecks(self._launched_handle, launch), Enqueued, timeout_s)
        assert isinstance(reply, Enqueued)
        if self._checked is None:
            self._checked = native.IpcEvent(self._device, reply.done)
        self._checked.wait()

    def read_run(self, timeout_s: float) -> tuple[tuple[int, ...], ...]:
        """Each launch's mismatch count per output, once the run's checks are done."""
        reply = self._ask(ReadRun(), RunCounts, timeout_s)
        assert isinstance(reply, RunCounts)
        return reply.mismatches

    def close(self) -> None:
        """Ask the judge to stop; whoever started it reaps it."""
        try:
            self._send(Stop())
        except JudgeFailed:
            pass
        self._conn.close()

    def _ask(self, request: JudgeRequest, expect: type, timeout_s: float) -> JudgeReply:
        self._send(request)
        reply = self._recv(timeout_s)
        if reply is None or not isinstance(reply, expect):
            raise JudgeFailed(f"the judge failed {type(request).__name__}: {self._text(reply)}")
        return reply

    def _send(self, request: object) -> None:
        try:
            self._conn.send(request)
        except (BrokenPipeError, OSError) as e:
            raise JudgeFailed(f"the pipe to the judge broke: {e}") from None

    def _recv(self, timeout_s: float) -> JudgeReply | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self._conn.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
                    reply: JudgeReply = self._conn.recv()
                    return reply
            except (EOFError, OSError):  # the judge is gone
                return None
        return None

    def _text(self, reply: JudgeReply | None) -> str:
        if isinstance(reply, JudgeFault):
            return f"{reply.name}: {reply.text}"
        if reply is None:
            return "no answer (it stopped, or did not answer in time)"
        return f"unexpected {type(reply).__name__}"
