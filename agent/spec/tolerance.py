"""How close a kernel's output must be to the float64 reference.

The error of element i is ``|out_i - ref_i| / (|ref_i| + s)``, where s is the RMS
of the reference's finite entries over the case (`scale`): entries of a sum that
cancel to near zero are judged on the output's scale, not on their own tiny
magnitude. With ``[tolerance] scale = "row"`` s is the RMS of the element's own row
(the output's last axis) instead: attention's first causal rows average a few values
and its last rows thousands, so one RMS for the case is set by the small ones and lets
the large ones drift (an honest bf16 kernel's worst error is 0.050 in the case's
measure at 16384 causal, 0.0077 in the row's: benchmarks/attention_tolerance_study.py). An output passes when every element's error is within ``rtol``, it is
finite where the reference is, and where the reference is not finite (an output
with ``allow_nonfinite``) it holds the same value: the same infinity, NaN for NaN.
This comparison is defined here once, in both the languages it runs in:
``relative_error`` (NumPy: reports, studies) and ``COMPARISON_CUDA`` (the GPU's
check, agent/worker/cuda/checks.cu).

Default rtol = 8 * eps(dtype) * sqrt(reduction length). Measured on the CPU
(scripts in benchmarks/tolerance_study.py): a sequential fp32 dot product reaches
about 1 * eps * sqrt(K) (K = 61 .. 4096), TF32 inputs about 8e-4 whatever K.
So for fp32 the default passes any honest fp32 summation order and rejects
TF32 by more than 20x at K = 4096. ``allow_tf32`` raises the bound to 4e-3.

16-bit outputs (float16, bfloat16). Their inputs are exact (agent/spec/inputs.py);
the kernel accumulates in the policy's dtype, float32 unless ``[tolerance]
accumulate`` says otherwise, and rounds once to the output at the end. The error
is then the accumulation's plus that last rounding, so

    rtol = 8 * u(accumulate) * sqrt(reduction length) + 2 * u(output)

with u the unit roundoff: 2^-11 for float16, 2^-8 for bfloat16 (2^-24 float32).
The first term is the fp32 rule above; the second is one rounding (at most
1 u of |ref|, so at most 1 u in this error's measure) with a factor 2 for the
fp32 value that lands near a rounding boundary. Measured on the CPU
(benchmarks/half_tolerance_study.py: GEMM K = 16 .. 4096, row sums of 1024 and
16384, RMSNorm of 4096, sequential fp32 accumulation): the worst honest result
reaches 0.68 u (bf16) and 0.66 u (fp16), within 2 u by 3x; the same results
accumulated in the 16-bit format itself reach 2.6 u (bf16) and 3.5 u (fp16) at
K = 16, 40 u at K = 4096 and 246 u on the bf16 RMSNorm: they fail it, but at
short reductions only just. A float32 or float64 output
with 16-bit inputs (a bf16 GEMM writing fp32) keeps the fp32 rule: products of
16-bit values are exact in float32.

The precision policy ``accumulate = "float32"`` (the default for 16-bit outputs).
On random inputs this tolerance catches 16-bit accumulation only where the
reduction is long enough for it to drift past it (a bf16 running sum over 256
threads passes rmsnorm's 33x4097). The rule that enforces the policy is the
accumulation probe (agent/spec/accumulation_probe.py): a workload with a 16-bit
array, a float32/float64 policy, a one-size ``reduction`` and no float16 output
gets an extra correctness case, the reduction 2^22 long, its inputs drawn like any
other case's. A 16-bit running sum rounds to 2^-p of itself at each add (p = 8
bfloat16, 11 float16), so over the thousands of terms each thread of a block then
adds it drifts by tens of percent, far past this tolerance at 2^22, where float32
stays well inside it (tests/test_half_checks.py simulates both in NumPy). The probe
alone misses a reduction split so finely that no 16-bit chain is long, float16
outputs (no probe: the reference of a sum of 2^22 terms near 1 can pass 65504), and a
kernel whose short-row path accumulates in 16 bits while the probe's length takes a
float32 fallback. The PTX audit catches those at compile time
(agent/runtime/ptx_audit.py; Workload.wide_accumulation): 16-bit adds, subs and fmas,
16-bit atomic adds and mma / wgmma with f16 accumulators, on every path of the kernel,
refused as HALF_ACCUMULATION. Still open: a 16-bit running sum kept in float32 adds
rounded to 16 bits after each (``cvt`` round trips) on a path the probe does not
take. Declaring ``accumulate = "float16"`` (or ``"bfloat16"``) removes the probe and
relaxes the tolerance by the same formula.

float32 inputs whose bits a kernel drops pass the fp32 rule at long K, since it
grows with sqrt(K); what would make that pay, narrower tensor-core math, is refused
in the machine code unless the workload names an error-compensated split
(agent/spec/precision_policy.py), and the one split that passes this rule, 3xTF32,
is float32-accurate to within a few units in the last place.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .half_float import is_narrow
from .workload_model import FLOAT_DTYPES, Case, Workload

# Unit roundoff per dtype (half the gap between 1 and the next value).
EPS = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
TF32_RTOL = 4e-3
ACCUMULATION_FACTOR = 8.0  # times u(accumulate) * sqrt(reduction length)
ROUNDING_FACTOR = 2.0  # times u(output), for a final rounding to a narrower output


def scale(reference: np.ndarray) -> float:
    """The RMS of the reference's finite entries (`scales` of the whole reference)."""
    return float(scales(reference)[0])


# Added to the denominator, so that an element whose reference and scale are both 0 (an
# all-zero case) still divides by something positive. 1e-300 rather than float64's tiny
# (2.2e-308, the smallest normal): a normal double seven decades above the subnormals, so
# no rounding of the sum and no flush-to-zero mode takes the denominator to 0, yet far
# below any |ref| + scale of a real case, so it decides no verdict; and its literal reads
# the same in both renderings.
DENOMINATOR_FLOOR = 1e-300


def same_nonfinite(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Where the output holds the reference's non-finite value (NaN for NaN, the same
    infinity): such an element passes, whatever the arithmetic says."""
    same: np.ndarray = (np.isnan(out) & np.isnan(ref)) | (np.isinf(ref) & (out == ref))
    return same


def row_length(shape: tuple[int, ...], per_row: bool) -> int:
    """The elements that share one scale: a row (the last axis) or the whole output."""
    return max(1, int(shape[-1]) if per_row and shape else int(np.prod(shape, dtype=np.int64)))


def scales(reference: np.ndarray, per_row: bool = False) -> np.ndarray:
    """The RMS of the finite entries of each row (the last axis) with `per_row`, else of the
    whole reference: float64, one per `row_length` elements, flat. Without overflow: one
    infinity or NaN would make it inf or NaN, failing every honest output of an
    ``allow_nonfinite`` workload, and one entry above 1.3e154 would square to inf, so that
    any finite output passed. Each row is scaled by its largest magnitude before squaring."""
    ref = np.asarray(reference, dtype=np.float64)
    if ref.size == 0:
        return np.zeros(1)
    rows = ref.reshape(-1, row_length(ref.shape, per_row))
    finite = np.isfinite(rows)
    magnitude = np.where(finite, np.abs(rows), 0.0)
    top = magnitude.max(axis=1)
    unit = np.where(top > 0, top, 1.0)[:, None]
    mean_square = np.sum(np.square(magnitude / unit), axis=1) / np.maximum(finite.sum(axis=1), 1)
    out: np.ndarray = np.where(top > 0, top * np.sqrt(mean_square), 0.0)
    return out


def relative_error(out: np.ndarray, ref: np.ndarray, per_row: bool = False) -> np.ndarray:
    """Each element's error against the float64 reference, on its case's or (`per_row`)
    its row's scale; 0 where `same_nonfinite`. An element passes when ``error <= rtol``:
    a NaN error fails."""
    ref = np.asarray(ref).astype(np.float64, copy=False)
    s = scales(ref, per_row)
    return error_on_scale(out, ref, s.reshape(ref.shape[:-1] + (1,)) if per_row and ref.ndim and ref.size else s[0])


def error_on_scale(out: np.ndarray, ref: np.ndarray, s: np.ndarray | float) -> np.ndarray:
    """The comparison itself, on scales `s` (broadcast against `ref`)."""
    ref = np.asarray(ref).astype(np.float64, copy=False)
    out = np.asarray(out).astype(np.float64, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(out - ref) / (np.abs(ref) + s + DENOMINATOR_FLOOR)
    return np.where(same_nonfinite(out, ref), 0.0, err)


# The same comparison over doubles, for the GPU's check (WS_CHECK_CLOSE in
# agent/worker/cuda/checks.cu), which skips an element WS_SAME_NONFINITE and fails one
# whose error is not <= rtol (NaN included). o: the output, r: the reference.
COMPARISON_CUDA = (
    "#define WS_SAME_NONFINITE(o, r) ((isnan(o) && isnan(r)) || (isinf(r) && (o) == (r)))\n"
    f"#define WS_RELATIVE_ERROR(o, r, scale) (fabs((o) - (r)) / (fabs(r) + (scale) + {DENOMINATOR_FLOOR!r}))\n")


def accumulation_dtype(dtype: str, accumulate: Optional[str]) -> str:
    """What an output of `dtype` is accumulated in: the policy's, else float32 for
    16-bit outputs and the output's own dtype for the others."""
    return accumulate or ("float32" if is_narrow(dtype) else dtype)


def default_rtol(dtype: str, reduction: float, accumulate: Optional[str] = None) -> float:
    acc = accumulation_dtype(dtype, accumulate)
    rtol = ACCUMULATION_FACTOR * EPS[acc] * math.sqrt(max(1.0, reduction))
    return rtol + ROUNDING_FACTOR * EPS[dtype] if EPS[dtype] > EPS[acc] else rtol


def case_rtol(workload: Workload, case: Case, dtype: str) -> float:
    """rtol for an output of `dtype` in `case`; 0 means exact (integers)."""
    if dtype not in FLOAT_DTYPES:
        return 0.0
    t = workload.tolerance
    if t.rtol is not None:
        return t.rtol
    reduction = t.reduction.evaluate(case.sizes) if t.reduction is not None else 1.0
    rtol = default_rtol(dtype, reduction, t.accumulate)
    return max(rtol, TF32_RTOL) if t.allow_tf32 and dtype == "float32" else rtol
