"""Device memory in whole pages.

The driver maps device memory in 2 MiB pages, and an allocation's last page past what was
asked for is mapped memory that nothing of ours reads: a kernel could keep data there
between launches. So every buffer a kernel can reach, and every buffer of the worker's own
it could write into, is asked for in whole pages: the slack is then known, and covered (the
fences keep a keystream in the slack of the case buffers, agent/worker/fences.py; the
worker's own scratch is zeroed whole before each launch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runtime.native import Buffer, Device

ALLOC_GRANULE = 2 << 20


def in_pages(nbytes: int) -> int:
    """nbytes rounded up to whole ALLOC_GRANULE pages (at least one)."""
    return max(1, (nbytes + ALLOC_GRANULE - 1) // ALLOC_GRANULE) * ALLOC_GRANULE


def alloc_pages(device: Device, nbytes: int, protectable: bool = False) -> Buffer:
    """A device buffer of at least nbytes, in whole pages, starting on one (else the end of
    its last page would be memory of somebody else's: refused, as nothing could fence it).
    `protectable`: mapped so that it can be made read-only for kernels (agent/worker/read_only.py)."""
    buffer = device.alloc(in_pages(nbytes), protectable=True) if protectable else device.alloc(in_pages(nbytes))
    if buffer.ptr % ALLOC_GRANULE:
        raise RuntimeError(f"the driver placed a {buffer.nbytes}-byte buffer at {buffer.ptr:#x}, not on a 2 MiB page: "
                           "warpsmith's fences assume whole pages (agent/worker/pages.py); please report this GPU "
                           "and driver")
    return buffer
