"""Child processes die with their parent, whatever killed it.

A SIGKILLed warpsmith runs no atexit handler, so its children (the GPU worker,
the compile process, a reference run) would live on, one of them perhaps holding
the GPU inside a hung kernel. Each child calls :func:`exit_with_parent` first: a
daemon thread polls the parent's pid and SIGKILLs its own process once the parent
is gone. A thread, not ``PR_SET_PDEATHSIG``: that signal fires when the *thread*
that started the child exits, and the app starts workers from worker threads. A
thread keeps running while the main thread waits in the driver (the GIL is
released there), and SIGKILL ends a process stuck in a hung kernel.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Callable, Optional

import warpsmith

from .secrets import without_secrets

POLL_S = 0.25


PID_ENV = "WARPSMITH_PID"  # set by child_env(): the warpsmith process a `python -m` child belongs to
# The folder that holds the `warpsmith` package this process runs (site-packages; in an
# editable install, the checkout's package/): a `python -m warpsmith...` child imports the same one.
PACKAGE_ROOT = Path(warpsmith.__file__).resolve().parents[1]


def python_module(module: str, *args: str) -> list[str]:
    """The command line that runs `module` in a child. `-P`: no working directory on
    sys.path, so a checkout (a source tree without the built module) never shadows the
    package this process imported; child_env()'s PYTHONPATH names that package's root."""
    return [sys.executable, "-P", "-m", module, *args]


def with_package_root(env: dict[str, str]) -> dict[str, str]:
    """`env` with PACKAGE_ROOT first on PYTHONPATH."""
    return {**env, "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])])}


def exit_with_parent(parent_pid: Optional[int] = None, poll_s: float = POLL_S) -> None:
    """Start the watch. `parent_pid` is the pid the parent passed down (its
    ``os.getpid()``): a parent that died before the child got here is caught too.
    Without it, the parent is the one at the time of the call."""
    parent = parent_pid if parent_pid is not None else os.getppid()
    _watch(lambda: os.getppid() == parent, poll_s)


def child_env() -> dict[str, str]:
    """The environment for a child started with subprocess, without secrets (what they
    run, a drafted reference say, is not the user's): this process's pid rides along
    for :func:`exit_with_warpsmith`."""
    return with_package_root({**without_secrets(os.environ), PID_ENV: str(os.getpid())})


def exit_with_warpsmith(poll_s: float = POLL_S) -> None:
    """For a `python -m warpsmith.agent.X` child started with child_env(), directly (the
    reference check) or by a tool (ncu starts the profiled launch): die once that
    warpsmith process is gone. Under ncu the parent is ncu, which has its own
    process group and outlives a SIGKILLed warpsmith, so the child watches
    warpsmith's pid itself; ncu ends when its target does. Run by hand (no
    variable): no watch."""
    pid = os.environ.get(PID_ENV)
    if not pid:
        return
    if os.getppid() == int(pid):
        exit_with_parent(int(pid), poll_s)
    else:
        _watch(lambda: _alive(int(pid)), poll_s)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _watch(alive: Callable[[], bool], poll_s: float) -> None:
    """SIGKILL this process now if `alive()` is already false, else as soon as it is."""
    if not alive():
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if not alive():
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="warpsmith-parent-watch", daemon=True).start()


def start_child(process: BaseProcess) -> None:
    """Start a multiprocessing child with the real stdout and stderr in place: a full-screen
    app replaces sys.stderr with an object without a file descriptor, and multiprocessing
    hands stderr's descriptor to its helper process and fails on it ("bad value(s) in
    fds_to_keep")."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        process.start()
    finally:
        sys.stdout, sys.stderr = saved
