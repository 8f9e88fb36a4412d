"""The study behind fp8_gemm's tolerance (a benchmark, not a test; NumPy on the CPU,
about a minute on one core).

Inputs are exact e4m3 values drawn as agent/spec/inputs.py draws them (uniform over the
workload's range, rounded once), per-tensor float32 scales likewise; the reference is
float64, C = scale_a * scale_b * (A @ B^T). Products of e4m3 values (4 significant bits)
are exact in float32, so a kernel's error is its accumulation's, its scaling's and the
final rounding to bfloat16. Each result is computed as a kernel would, then rounded once
to bfloat16, and judged with warpsmith's error |out - ref| / (|ref| + rms(ref)), printed
in units of bfloat16's unit roundoff u = 2^-8 beside the default rtol (agent/spec/tolerance.py:
8 u(float32) sqrt(K) + 2 u(bfloat16)) in the same unit:

- fp32 seq: one float32 running sum, one product at a time (the worst honest order);
- fp32 k32: each k32 slice summed in float32, then added to a float32 sum (wgmma's order);
- 14-bit: an emulation of Hopper's fp8 wgmma accumulator, which keeps about 14 bits
  when it adds a k32 slice (DeepSeek-V3 report, section 3.3.2): each slice is added with
  the sum truncated to 14 significant bits of the larger of the two magnitudes. An
  emulation of the report's description, not of the hardware: a GPU run decides;
- 14-bit promoted: the same, its partial sum added into a float32 accumulator every
  128 elements of K and restarted (DeepGEMM's two-level accumulation);
- fp16 acc: the accumulator rounded to float16 after each k32 slice (QGMMA with an F16
  accumulator, which the precision policy refuses).

The last rows are the accumulation probe (agent/spec/accumulation_probe.py): K = 2^22, its
inputs drawn like every other case's.

    python3 benchmarks/fp8_tolerance_study.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from warpsmith.agent.spec.accumulation_probe import PROBE_REDUCTION  # noqa: E402
from warpsmith.agent.spec.half_float import round_to  # noqa: E402
from warpsmith.agent.spec.tolerance import EPS, default_rtol, relative_error  # noqa: E402

SLICE = 32  # K of one wgmma
PROMOTE = 128  # K between promotions (DeepGEMM: one 128-wide k-block)
KEPT_BITS = 14
RANGE = 448.0  # the workload's input range: e4m3's own, as amax scaling fills it


def truncate(x: np.ndarray, reference: np.ndarray, bits: int) -> np.ndarray:
    """x cut toward zero to `bits` significant bits of the larger of |x| and |reference|."""
    top = np.maximum(np.abs(x), np.abs(reference))
    _, exponent = np.frexp(np.where(top > 0, top, 1.0))
    quantum = np.ldexp(1.0, exponent - bits)
    out: np.ndarray = np.trunc(x / quantum) * quantum
    return out


def accumulate(a: np.ndarray, b: np.ndarray, how: str) -> np.ndarray:
    """sum_k a[:, k] * b[:, k] over rows of a and b (M x K and N x K), as `how` says, float64 out."""
    m, k = a.shape
    n = b.shape[0]
    total = np.zeros((m, n), np.float32)
    partial = np.zeros((m, n), np.float64)
    for k0 in range(0, k, 1 if how == "fp32 seq" else SLICE):
        width = 1 if how == "fp32 seq" else min(SLICE, k - k0)
        terms = a[:, None, k0:k0 + width].astype(np.float32) * b[None, :, k0:k0 + width].astype(np.float32)
        if how in ("fp32 seq", "fp32 k32"):
            total = (total + terms.sum(axis=-1, dtype=np.float32)).astype(np.float32)
            continue
        slice_sum = terms.astype(np.float64).sum(axis=-1)  # the tensor core's own sum of one slice
        if how == "fp16 acc":
            partial = round_to(partial + slice_sum, "float16")
            continue
        partial = truncate(partial + slice_sum, slice_sum, KEPT_BITS)
        if how == "14-bit promoted" and ((k0 + SLICE) % PROMOTE == 0 or k0 + SLICE >= k):
            total = (total + partial.astype(np.float32)).astype(np.float32)
            partial[:] = 0.0
    if how in ("14-bit", "fp16 acc"):
        return partial.astype(np.float32).astype(np.float64)
    return total.astype(np.float64)


def scaled(acc: np.ndarray, scale_a: float, scale_b: float) -> np.ndarray:
    """The epilogue: acc * (scale_a * scale_b) in float32, rounded once to bfloat16."""
    s = np.float32(scale_a) * np.float32(scale_b)
    return round_to((acc.astype(np.float32) * s).astype(np.float64), "bfloat16")


WAYS = ("fp32 seq", "fp32 k32", "14-bit", "14-bit promoted", "fp16 acc")


def main() -> None:
    rng = np.random.default_rng(47)
    u = EPS["bfloat16"]
    print(f"{'case':<24}{'accumulation':<18}{'max err/u':>10}{'rtol/u':>9}  verdict")
    for m, n, k in ((48, 48, 16), (48, 48, 128), (32, 32, 1000), (32, 32, 4096), (32, 32, 8192), (32, 32, 14336)):
        a = round_to(rng.uniform(-RANGE, RANGE, (m, k)), "float8_e4m3fn")
        b = round_to(rng.uniform(-RANGE, RANGE, (n, k)), "float8_e4m3fn")
        scale_a, scale_b = (float(np.float32(rng.uniform(2.0**-10, 2.0**-4))) for _ in range(2))
        ref = (a @ b.T) * (scale_a * scale_b)
        rtol = default_rtol("bfloat16", k, "float32")
        for how in WAYS:
            err = float(relative_error(scaled(accumulate(a, b, how), scale_a, scale_b), ref).max())
            print(f"{f'{m}x{n}x{k}':<24}{how:<18}{err / u:>10.3f}{rtol / u:>9.3f}  {'pass' if err <= rtol else 'FAIL'}")
    # The probe: K = 2^22, its inputs drawn like every case's; one row and four columns
    # (the workload's 16 add nothing: each column is an independent sum). The sequential
    # order would take 2^22 steps here, so the slice orders only.
    m, n, k = 1, 4, PROBE_REDUCTION
    a = round_to(rng.uniform(-RANGE, RANGE, (m, k)), "float8_e4m3fn")
    b = round_to(rng.uniform(-RANGE, RANGE, (n, k)), "float8_e4m3fn")
    ref = a @ b.T
    rtol = default_rtol("bfloat16", k, "float32")
    for how in ("fp32 k32", "14-bit", "14-bit promoted"):
        err = float(relative_error(scaled(accumulate(a, b, how), 1.0, 1.0), ref).max())
        print(f"{'probe 1x4x2^22':<24}{how:<18}{err / u:>10.3f}{rtol / u:>9.3f}  {'pass' if err <= rtol else 'FAIL'}")

if __name__ == "__main__":
    main()
