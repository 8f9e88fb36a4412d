"""The parent's side of the compile process (agent/runtime/compile_child.py).

NVRTC runs model-written source. In its own process it cannot see the parent's
environment (API keys), its working directory or its memory, and a compile that
hangs or crashes costs one attempt, not the session. The process is started lazily,
reused (a fresh one would cost ~0.5 s per compile), and replaced after a timeout or
a crash. It gets:

- a minimal environment: LD_LIBRARY_PATH, CUDA_HOME and CUDA_PATH where set (what
  NVRTC needs to load), PYTHONPATH set to the directory holding the ``warpsmith``
  package this process imported (so the child runs the same code), and nothing
  else: no secret, no HOME;
- an empty private working directory (never the user's), removed on close;
- ``python -P`` where available, so that directory is not on ``sys.path`` either.

A compile may take :data:`TIMEOUT_S` (60 s; ``timeout_s`` per call overrides it);
past that the process is killed and the result is ``COMPILE_TIMEOUT``. A process
that dies mid-compile gives ``COMPILE_CRASHED``. One request at a time (a lock).

Compiles from several threads at once (the tuner compiling its next candidates while
the GPU times the current one) go through :func:`compile_pool`: up to one process per
host core, each like the one above; a single thread only ever uses the first.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

from .compile_child import _LENGTH, write_message
from .parent_watch import PACKAGE_ROOT, python_module

TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0
_KEEP_ENV = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")


class _Gone(Exception):
    """The process closed its pipe (it died)."""


def child_env() -> dict[str, str]:
    """What the compile process may see of the environment."""
    env = {k: os.environ[k] for k in _KEEP_ENV if os.environ.get(k)}
    env["PYTHONPATH"] = str(PACKAGE_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _failed(error: str, log: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "log": log, "compile_ms": 0.0, "lowered_name": "", "cubin": "", "half_ops": []}


class CompileProcess:
    def __init__(self, header_dir: Path):
        self.header_dir = header_dir
        self.requests = 0  # compiles sent to NVRTC, for tests and diagnostics
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._workdir: Optional[str] = None

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    @property
    def workdir(self) -> Optional[str]:
        return self._workdir

    def compile(self, source: str, filename: str, entry: str, options: list[str], arch: str,
                timeout_s: Optional[float] = None) -> dict[str, Any]:
        """The child's answer: ok, error, log, compile_ms, lowered_name, cubin (base64), half_ops
        and narrow_ops (the PTX audit's instruction names; None: no PTX to audit), sass_ops,
        param_ops and state_ops (the machine code's; None: it could not be read, sass_error
        says why)."""
        limit = TIMEOUT_S if timeout_s is None else timeout_s
        request = {"source": source, "filename": filename, "entry": entry, "options": list(options), "arch": arch}
        with self._lock:
            try:
                proc = self._start()
            except (_Gone, TimeoutError, OSError) as e:
                code = self._kill()
                return _failed("COMPILE_CRASHED", f"the compile process did not start ({e or _exit_text(code)})")
            self.requests += 1
            try:
                assert proc.stdin is not None  # started with a pipe
                write_message(proc.stdin, request)
                return self._read(time.monotonic() + limit)
            except TimeoutError:
                self._kill()
                return _failed("COMPILE_TIMEOUT", f"NVRTC took longer than {limit:g} s; the compile process was killed")
            except (_Gone, BrokenPipeError, OSError):
                code = self._kill()
                return _failed("COMPILE_CRASHED", f"the compile process died while compiling ({_exit_text(code)}); "
                                                  "the next compile starts a fresh one")

    def close(self) -> None:
        """End the process (it exits on end of input) and remove its directory."""
        with self._lock:
            self._kill(gently=True)

    # -- the process --------------------------------------------------------
    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc and self._proc.poll() is None:
            return self._proc
        self._kill()
        self._workdir = tempfile.mkdtemp(prefix="warpsmith-nvrtc-")
        self._proc = subprocess.Popen(
            python_module(f"{__package__}.compile_child", str(os.getpid()), str(self.header_dir)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env(),
            cwd=self._workdir, close_fds=True)
        hello = self._read(time.monotonic() + START_TIMEOUT_S)
        if not hello.get("ready"):
            raise _Gone("no greeting")
        return self._proc

    def _read(self, deadline: float) -> dict[str, Any]:
        head = self._read_exact(_LENGTH.size, deadline)
        message: dict[str, Any] = json.loads(self._read_exact(_LENGTH.unpack(head)[0], deadline))
        return message

    def _read_exact(self, n: int, deadline: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None  # started with a pipe
        fd = self._proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise _Gone()
            buf += chunk
        return bytes(buf)

    def _kill(self, gently: bool = False) -> Optional[int]:
        """Stop the process (end of input first when `gently`); its exit code, if there was one."""
        proc, self._proc = self._proc, None
        code = None
        if proc:
            try:
                if gently and proc.stdin is not None:
                    proc.stdin.close()
                    code = proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            if code is None:
                proc.kill()
                code = proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        return code


def _exit_text(code: Optional[int]) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


_process: Optional[CompileProcess] = None
_process_lock = threading.Lock()


def compile_process(header_dir: Path) -> CompileProcess:
    """The shared compile process (one per parent process)."""
    global _process
    with _process_lock:
        if _process is None:
            _process = CompileProcess(header_dir)
            atexit.register(_process.close)
        return _process


class CompilePool:
    """Up to `size` compile processes, started as concurrent compiles need them."""

    def __init__(self, header_dir: Path, size: int):
        self.header_dir, self.size = header_dir, max(1, size)
        self._idle: list[CompileProcess] = []
        self._started: list[CompileProcess] = []
        self._cond = threading.Condition()

    @property
    def started(self) -> int:
        return len(self._started)

    def compile(self, source: str, filename: str, entry: str, options: list[str], arch: str,
                timeout_s: Optional[float] = None) -> dict[str, Any]:
        process = self._take()
        try:
            return process.compile(source, filename, entry, options, arch, timeout_s)
        finally:
            with self._cond:
                self._idle.append(process)
                self._cond.notify()

    def _take(self) -> CompileProcess:
        with self._cond:
            while not self._idle and len(self._started) >= self.size:
                self._cond.wait()
            if self._idle:
                # The shared process first when it is free: after a burst of parallel compiles
                # a single thread still uses the first, as documented (its sandbox is checked).
                first = self._started[0]
                if first in self._idle:
                    self._idle.remove(first)
                    return first
                return self._idle.pop()
            # The first is the shared process (what a single thread has always used).
            process = compile_process(self.header_dir) if not self._started else CompileProcess(self.header_dir)
            if self._started:
                atexit.register(process.close)
            self._started.append(process)
            return process


_pool: Optional[CompilePool] = None


def compile_pool(header_dir: Path) -> CompilePool:
    """The shared pool: one compile process per host core at most."""
    global _pool
    with _process_lock:
        if _pool is None:
            _pool = CompilePool(header_dir, os.cpu_count() or 1)
        return _pool
