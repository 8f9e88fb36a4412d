"""What the driver keeps in a launch's constant bank 0 below (or beside) the kernel's
parameters, per architecture family, and which of those words a kernel may read.

Measured by compiling a kernel per PTX special register and per address conversion with
NVRTC 13 and reading the bank-0 offsets its SASS loads (tests/test_sass_memory.py
compiles the same probes and checks this table against them). A kernel reads the
launch's shape, its shared-memory sizes (the reserved kilobyte's bounds among them) and its
cluster's shape; its stack pointer and local window; the global memory descriptor its loads and stores name (``desc[UR4]``).
Everything else the driver keeps there is refused: the environment registers
(``%envreg``), the grid and graph ids, the generic windows of constant memory (through
which ``__constant__`` data can be written) and of the parameter space (its size).

The parameter space's own generic address (``cvta.param``, the address of a
``__grid_constant__`` parameter) is not a plain read: it is allowed only where it ends as
a TMA descriptor (agent/runtime/sass_memory.py).

On sm_100 and later ptxas reads the cluster's shape, the dynamic and reserved shared
memory sizes at a register index (a table per cluster size): a kernel that reads them is
refused there, a limit of the rule, not of the kernel."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Bank0:
    family: str
    readable: dict[int, str]  # offset of a 32-bit word -> what it holds (an allowed read)
    descriptor: int  # the global memory descriptor, 64 bits
    parameter_address: int  # the generic address of the parameters, 64 bits
    constant_window: int  # the generic address of __constant__ memory (cvta.const), 64 bits

    def name(self, offset: int, size: int) -> Optional[str]:
        """What an allowed read of `size` bytes at `offset` reads; None if any of it is not allowed."""
        if offset in (self.descriptor, self.descriptor + 4) and offset + size <= self.descriptor + 8:
            return "the global memory descriptor"
        words = range(offset - offset % 4, offset + size, 4)
        names = [self.readable.get(w) for w in words]
        if any(n is None for n in names):
            return None
        return ", ".join(dict.fromkeys(n for n in names if n))


def _words(base: int, *names: str) -> dict[int, str]:
    return {base + 4 * i: n for i, n in enumerate(names)}


_SHAPE = ("blockDim.x", "blockDim.y", "blockDim.z", "gridDim.x", "gridDim.y", "gridDim.z")
_LOCAL = ("the local window", "the local window", "the stack pointer", "the dynamic shared memory size")
_RESERVED = "the reserved shared memory's bounds"
TURING = Bank0("sm_75", {**_words(0x0, *_SHAPE), **_words(0x20, *_LOCAL), 0x10C: "the SM count"}, -1, 0x40, 0x50)
AMPERE = Bank0("sm_80..sm_89", {**_words(0x0, *_SHAPE), **_words(0x20, *_LOCAL), 0x10C: "the SM count",
                                0x114: "the shared memory size", **_words(0x120, _RESERVED, _RESERVED)},
               0x118, 0x40, 0x50)
HOPPER = Bank0("sm_90", {**_words(0x0, *_SHAPE), **_words(0x20, *_LOCAL), **_words(0x68, _RESERVED, _RESERVED),
                         0x10C: "the SM count",
                         0x114: "the shared memory size", 0x13C: "the cluster's shared memory size",
                         0x140: "whether the cluster is explicit",
                         **_words(0x144, "the cluster's shape", "the cluster's shape", "the cluster's shape"),
                         **_words(0x15C, "the cluster grid", "the cluster grid", "the cluster grid"),
                         0x188: "the cluster's block count"}, 0x208, 0x198, 0xD0)
BLACKWELL = Bank0("sm_100..sm_121", {**_words(0x360, *_SHAPE[:3]), **_words(0x370, *_SHAPE[3:]), 0x2F8: "the local window", 0x2FC: "the local window",
                                     0x37C: "the stack pointer", 0x2D0: "the SM count",
                                     0x16C: "the shared memory size", 0x36C: "whether the cluster is explicit"},
                  0x358, 0x348, 0x120)


def layout(target: str) -> Optional[Bank0]:
    """The layout of the CUBIN's target (``sm_90a``); None for one not measured."""
    m = re.fullmatch(r"sm_(\d+)[af]?", target)
    number = int(m.group(1)) if m else 0
    if number == 75:
        return TURING
    if 80 <= number <= 89:
        return AMPERE
    if number == 90:
        return HOPPER
    if 100 <= number <= 121:
        return BLACKWELL
    return None
