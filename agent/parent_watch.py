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
import threading
import time
from typing import Optional

POLL_S = 0.25


def exit_with_parent(parent_pid: Optional[int] = None, poll_s: float = POLL_S) -> None:
    """Start the watch. `parent_pid` is the pid the parent passed down (its
    ``os.getpid()``): a parent that died before the child got here is caught too.
    Without it, the parent is the one at the time of the call."""
    parent = parent_pid if parent_pid is not None else os.getppid()
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="warpsmith-parent-watch", daemon=True).start()
