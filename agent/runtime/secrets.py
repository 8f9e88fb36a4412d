"""API keys and tokens out of every child process's reach.

The children that run written code (NVRTC on a model's source, a drafted reference,
the GPU worker) get environments without secrets. That alone is not enough: on Linux
any process of the same user reads ``/proc/<pid>/environ`` of another, and a child
knows its parent's pid: a header whose computed include a model's macros steer, or a
drafted reference, could read the session's API key that way. ``/proc/<pid>/environ`` shows the environment block the
process was started with, whatever ``os.environ`` became since; so the session
overwrites, in that block, the value of every variable SECRET names (with ``*``, the
same length). First each is set again (setenv: the C library copies it elsewhere and
points ``environ`` at the copy), so ``os.environ``, ``getenv`` in this process (Ray's
token loader, say) and children started without an explicit environment still get the
real values; only what ``/proc`` shows is overwritten. Children that run written code
get an explicit environment without secrets (``without_secrets``), and a Ray cluster
warpsmith starts gets none either (agent/evaluate/ray_cluster.py's init_ray).

Not covered: a process of the same user with ptrace rights (Yama scope 0, or root) reads
memory, not only /proc/<pid>/environ; and other processes started with the key (the
shell, a tmux server) show it in their own blocks.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path
from typing import Mapping

SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less every variable whose name says it holds a key, a token or a secret."""
    return {k: v for k, v in env.items() if not SECRET.search(k)}


def _block() -> tuple[int, int]:
    """Where this process's original environment block lies (env_start, env_end: fields
    50 and 51 of /proc/self/stat), or (0, 0)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return 0, 0


def _writable(start: int, end: int) -> bool:
    """Whether [start, end) lies inside one writable mapping of this process (a write
    anywhere else would fault)."""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= start and end <= hi:
                return perms.startswith("rw")
    except (OSError, ValueError):
        pass
    return False


def hide_environ_block() -> list[str]:
    """Overwrite the secrets' values in this process's original environment block; the
    names of those overwritten. Nothing where the block cannot be found (not Linux)."""
    start, end = _block()
    if not start or end <= start or not _writable(start, end):
        return []
    for variable in [n for n in os.environ if SECRET.search(n)]:
        os.putenv(variable, os.environ[variable])  # environ now points at a copy: getenv keeps the value
    block = ctypes.string_at(start, end - start)
    hidden, offset = [], 0
    for entry in block.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and value and SECRET.search(name.decode(errors="replace")) and value.strip(b"*"):
            at = start + offset + len(name) + 1
            ctypes.memmove(at, b"*" * len(value), len(value))
            hidden.append(name.decode(errors="replace"))
        offset += len(entry) + 1
    return hidden
