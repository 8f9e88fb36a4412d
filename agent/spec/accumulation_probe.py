"""The precision policy's probe case: a correctness case that a kernel accumulating in
16 bits fails by a wide margin, while any float32 accumulation passes it exactly.

A workload with a 16-bit array whose policy accumulates in float32 or float64 (the
default for 16-bit outputs, or ``[tolerance] accumulate = "float32"``), whose
``reduction`` is one size and which has no float16 output gets one extra correctness
case: the smallest correctness case with that size set to PROBE_REDUCTION, every
input filled with one constant (its range's value nearest 1, agent/spec/inputs.py).
Its arrays must fit in PROBE_MAX_BYTES. Every
term of the reduction is then the same value t, whatever the kernel sums (values,
squares, products):

- float32 adds n equal terms exactly up to n = 2^24 (t times an integer below 2^24
  needs at most 24 significant bits), in any order: the probe's error is the final
  rounding alone;
- a 16-bit running sum stops growing at 2^p t (p = 8 for bfloat16, 11 for float16):
  adding t to 2^p t is a tie, and ties go to the even neighbour, 2^p t itself. A
  thread that adds more than 2^p terms keeps 2^p of them. With PROBE_REDUCTION =
  2^22, a block of up to 1024 threads on one reduction gives each thread 4096 terms:
  bfloat16 keeps 1/16 of the sum, float16 1/2; an error far past any tolerance.

float16 outputs get no probe: a sum or product of 2^22 terms near 1 is past float16's
largest value (65504), so the reference itself would not fit the output and an honest
kernel would fail. What it does not catch either: a reduction split so finely that no 16-bit chain adds more
than 2^p terms (a pairwise tree of equal terms is exact), and a kernel whose short-row
path accumulates in 16 bits while its long-row path, the one the probe's length takes,
does not. The PTX audit covers those at compile time (agent/runtime/ptx_audit.py: 16-bit
adds and fmas, f16-accumulator mma / wgmma, on every path).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from .expr import Expr
from .half_float import is_narrow

PROBE_REDUCTION = 1 << 22
PROBE_MAX_BYTES = 256 << 20  # the probe's arrays together; a workload past it gets no probe
WIDE_ACCUMULATORS = (None, "float32", "float64")


def probe_name(size: str) -> str:
    """Names its size and length: a changed PROBE_REDUCTION never meets an old cached reference."""
    return f"accumulate-probe-{size}{PROBE_REDUCTION}"


def probe_sizes(dtypes: Sequence[str], output_dtypes: Sequence[str], accumulate: Optional[str], reduction: Optional[Expr],
                cases: Sequence[tuple[str, dict[str, int]]],
                array_bytes: Callable[[dict[str, int]], int]) -> Optional[dict[str, int]]:
    """The probe case's sizes, or None when the workload gets no probe. `dtypes` are every
    array's, `output_dtypes` the outputs'; `cases` are the
    correctness cases' (name, sizes); `array_bytes(sizes)` the bytes of every array."""
    if accumulate not in WIDE_ACCUMULATORS or not any(is_narrow(d) for d in dtypes) or reduction is None:
        return None
    if "float16" in output_dtypes:
        return None
    size = reduction.text.strip()
    if not size.isidentifier() or not cases or any(size not in sizes for _, sizes in cases):
        return None
    smallest = min((sizes for _, sizes in cases), key=lambda s: math.prod(s.values()))
    sizes = {**smallest, size: PROBE_REDUCTION}
    return sizes if array_bytes(sizes) <= PROBE_MAX_BYTES else None
