"""The precision policy's probe case: a correctness case so long that a kernel
accumulating in 16 bits fails it by a wide margin, while any float32 accumulation passes.

A workload with a 16-bit array whose policy accumulates in float32 or float64 (the
default for 16-bit outputs, or ``[tolerance] accumulate = "float32"``), whose
``reduction`` is one size and which has no float16 output gets one extra correctness
case: the smallest correctness case with that size set to PROBE_REDUCTION. Its inputs
are drawn like every other case's (the workload's ranges, random): nothing in the data
tells a kernel that this launch is the probe, only its length, and a kernel that is
honest at every length of 2^22 is honest where the probe judges it. Its arrays must fit
in PROBE_MAX_BYTES.

Why 2^22 of random terms is enough: a 16-bit running sum rounds to 2^-p of its own
size at each add (p = 8 for bfloat16, 11 for float16). A block of up to 1024 threads on
one reduction gives each thread at least 4096 terms: a sum of squares (RMSNorm) stops
growing once it passes 2^p terms' worth, and a sum of signed products (a GEMM's K)
wanders by 2^-p of itself per add, so the result is off by tens of percent, where the
tolerance at 2^22 is under 1% (tests/test_half_checks.py simulates it: 80x to 450x the
rtol for RMSNorm, float32 at 0.3x). Shorter reductions do not do that: a bf16 running
sum over 256 threads passes rmsnorm's 33x4097.

float16 outputs get no probe: a sum or product of 2^22 terms near 1 can pass float16's
largest value (65504), so the reference itself would not fit the output. What the
probe does not catch: a reduction split so finely that no 16-bit chain adds more than
2^p terms, and a kernel whose short-row path accumulates in 16 bits while its long-row
path, the one the probe's length takes, does not. The PTX audit covers those at compile
time (agent/runtime/ptx_audit.py: 16-bit adds and fmas, f16-accumulator mma / wgmma, on
every path).
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
