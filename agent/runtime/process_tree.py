"""A process's descendants, found and killed through /proc (Linux): whatever a child that
runs user code started, including what left its process group (setsid) and, with the
child a subreaper, what double-forked away from it. Killing the group alone leaves those
running, and a detached one that holds the child's stdout keeps its answer from being read."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 5  # listings and kills: a descendant forking between the two is caught by the next


def become_subreaper() -> None:
    """Orphans among this process's descendants are re-parented to it, not to init, so
    they stay in its tree (and kill_descendants finds them)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:  # it ended while listed
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # after the command name, which may hold spaces
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(pid: int) -> None:
    """SIGKILL every descendant of `pid`, then reap those that were this process's own."""
    if not Path("/proc").is_dir():
        return
    for _ in range(ROUNDS):
        found = descendants(pid)
        if not found:
            break
        for child in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
    if pid == os.getpid():
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
