"""The evaluator's handle on its GPU worker: start, talk with deadlines, kill."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Optional

from ..runtime.parent_watch import start_child
from .gpu_side import worker_main
from .judge import start_judge
from .protocol import Fault, Reply, Request, Shutdown, WorkerReady


class GpuUnavailable(RuntimeError):
    """The worker could not open the GPU (no driver, no device, NVRTC mismatch)."""


class WorkerTimeout(RuntimeError):
    pass


class WorkerDied(RuntimeError):
    pass


class WorkerProcess:
    """A spawned process running :func:`warpsmith.agent.worker.gpu_side.worker_main` (spawn, not fork:
    a forked CUDA context is unusable)."""

    def __init__(self, ordinal: int = 0, start_timeout_s: float = 120.0, log_path: Optional[Path] = None,
                 separate_judge: bool = False):
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        # The judge beside the worker, not under it (agent/worker/judge.py)
        self._judge: Optional[BaseProcess] = None
        to_judge: Optional[Connection] = None
        if separate_judge:
            self._judge, to_judge = start_judge(ordinal)
        self._proc = ctx.Process(target=worker_main, args=(child, ordinal, str(log_path) if log_path else None,
                                                           os.getpid(), to_judge),
                                 daemon=True, name="warpsmith-gpu-worker")
        start_child(self._proc)
        child.close()
        if to_judge is not None:
            to_judge.close()  # the worker's now: the judge must see EOF when the worker goes
        try:
            reply = self.recv(start_timeout_s)
        except (WorkerTimeout, WorkerDied) as e:
            self.kill()
            raise GpuUnavailable(f"the GPU worker did not start: {e}") from None
        if isinstance(reply, Fault):
            self.kill()
            raise GpuUnavailable(f"{reply.name}: {reply.text}")
        assert isinstance(reply, WorkerReady)
        self.ready: WorkerReady = reply
        self.restarts = 0

    @property
    def alive(self) -> bool:
        return self._proc.is_alive()

    def send(self, message: Request) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, OSError) as e:
            raise WorkerDied(f"pipe to the worker broke: {e}") from None

    def recv(self, timeout_s: float) -> Reply:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout(f"no answer within {timeout_s:.0f} s")
            try:
                if self._conn.poll(min(left, 0.5)):
                    reply: Reply = self._conn.recv()  # unpickled: what the worker sent
                    return reply
            except (EOFError, OSError):
                raise WorkerDied(self._death()) from None
            if not self._proc.is_alive() and not self._conn.poll(0):
                raise WorkerDied(self._death())

    def _death(self) -> str:
        self._proc.join(timeout=5)
        return f"the worker exited with code {self._proc.exitcode}"

    def kill_process(self) -> None:
        """SIGKILL only, safe from another thread: the thread reading the pipe sees
        EOF and the pipe is closed by its owner."""
        for process in (self._proc, self._judge):
            if process is not None and process.is_alive():
                process.kill()

    def kill(self) -> None:
        self.kill_process()
        for process in (self._proc, self._judge):
            if process is not None:
                process.join(timeout=30)
        self._conn.close()

    def close(self) -> None:
        try:
            self.send(Shutdown())
            self._proc.join(timeout=10)
        except WorkerDied:
            pass
        self.kill()
