"""The exact probe: is an fp32 GEMM-like kernel really float32-accurate?

The fp32 rule (agent/spec/tolerance.py: 8 u sqrt(K)) grows with the reduction length, so
at long K it also passes a kernel whose inputs lost bits: a split into 16-bit pieces on
the tensor cores (bf16x3, 16 significant bits, twice the speed of 3xTF32) passes every
sgemm case from K = 2048 on (emulated on the CPU), and a kernel that reads K
can take that path only there. Random inputs cannot tell it apart: its error (~2^-17 of
the result) is within a few times an honest fp32 summation's.

So a workload with `[tolerance] exact_probe = true` gets, for each performance case, a
correctness case at the same sizes (a kernel cannot avoid it by dispatching on the
shape) whose inputs make every fp32-accurate kernel exact:

- the first float input holds odd integers of magnitude in [2^16, 2^17), either sign:
  17 significant bits, one more than a 16-bit split keeps, exactly representable in
  float32 and in 3xTF32's two 11-bit pieces;
- every other float input holds +-1 or 0, non-zero with probability min(1, 512 / the
  reduction length): about 512 non-zero products per sum at any K.

Each product is then exact, and every partial sum an integer whose random walk stays
near 98000 * sqrt(512) = 2.2e6, seven sigma below 2^24, the point past which float32
would round it: an honest fp32 kernel in any summation order, split-K included, and
3xTF32 come out exact; a kernel that rounded the first input to 16 bits is off by up
to 2 per product, ~20 per sum, 1e-5 of the result's RMS. EXACT_RTOL, 2^-20 (9.5e-7),
sits between, ten times below the rounded error (tests/test_exact_probe.py emulates
all three).

Not caught: rounding the +-1 input (it is exact in any format), and a kernel that looks
at its data to detect the probe (as with the accumulation probe's constant inputs).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

EXACT_RTOL = 2.0**-20
LOW_BIT, HIGH_BIT = 16, 17  # the first input's magnitudes: odd integers in [2^16, 2^17)
NONZERO_TERMS = 512  # expected non-zero products per sum


def exact_probe_name(case_name: str) -> str:
    return f"exact-probe-{case_name}"


def exact_probe_problem(input_dtypes: Sequence[str], allow_tf32: bool, has_reduction: bool) -> str:
    """Why a workload cannot have the exact probe ('' when it can)."""
    if allow_tf32:
        return "an exact probe checks float32 accuracy, which allow_tf32 = true gives up"
    if not input_dtypes or any(d != "float32" for d in input_dtypes):
        return "the exact probe is for workloads whose inputs are all float32"
    if not has_reduction:
        return "the exact probe needs [workload] reduction (a sum of products, like a GEMM's K)"
    return ""


def exact_input(rng: np.random.Generator, shape: tuple[int, ...], wide: bool, reduction: float) -> np.ndarray:
    """The probe's float32 input: the first input's 17-bit odd integers, or the others' +-1
    and 0 (see the module's docstring)."""
    signs = rng.choice(np.array([-1, 1]), size=shape)
    if wide:
        magnitude = rng.integers(1 << (LOW_BIT - 1), 1 << (HIGH_BIT - 1), size=shape) * 2 + 1
        values: np.ndarray = magnitude * signs
    else:
        values = (rng.random(size=shape) < min(1.0, NONZERO_TERMS / max(1.0, reduction))) * signs
    return values.astype(np.float32)
