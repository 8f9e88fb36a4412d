"""Inputs and references, read-only for kernels.

A case's inputs stay resident for the session, and checksums taken after a run alone
cannot protect them: a kernel could keep its output in them between timed launches and
put them back before the harness looks. sgemm's inputs, as drawn, have bits that are
the same in every element (bit 30 of a float in [-1, 1) is always 0), room enough for
a whole output; a kernel that stores C in A on one launch and copies it back on the
next computes half of the time, while every
judged output is right and the inputs are intact whenever they are checked (emulated on
the CPU). So the buffers of inputs and references are
mapped through the virtual memory API and set read-only for the GPU once their data,
guard bands and masks are written: a kernel's store into them faults (a crashed
attempt: the worker restarts), whatever the kernel keeps and whenever it puts it back.
The harness makes them writable again only while it writes them itself (`writable`).

Where the driver cannot map memory read-only, the buffers stay writable, the checksums
and fences cover them as before, and the worker log says so once.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from ..runtime.native import Buffer

_warned = False


def protect(buffer: Buffer) -> None:
    """Read-only for kernels from now on, where the driver can (else one line on stderr)."""
    global _warned
    if not getattr(buffer, "protectable", False):
        return
    try:
        buffer.read_only = True
    except Exception as e:  # noqa: BLE001 - a driver without read-only mappings: the checksums still hold
        if not _warned:
            _warned = True
            print(f"warpsmith worker: inputs stay writable for kernels ({getattr(e, 'name', type(e).__name__)}): "
                  "their checksums after each run are the guard", file=sys.stderr)


def is_read_only(buffer: Buffer) -> bool:
    return bool(getattr(buffer, "read_only", False))


@contextmanager
def writable(buffer: Buffer) -> Iterator[None]:
    """Around the harness's own writes into a protected buffer (an upload, a mask, a guard)."""
    if not is_read_only(buffer):
        yield
        return
    buffer.read_only = False
    try:
        yield
    finally:
        buffer.read_only = True
