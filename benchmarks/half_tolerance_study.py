"""The study behind the default tolerance of float16 / bfloat16 outputs (a benchmark,
not a test; NumPy on the CPU, about a minute on one core).

Inputs are exact 16-bit values (as agent/spec/inputs.py draws them). Each result is
computed the way a kernel would: accumulated in float32 in the worst honest order
(sequential), or in the 16-bit format itself, then rounded once to the output dtype.
The error is warpsmith's, |out - ref| / (|ref| + rms(ref)) against the float64
reference, printed in units of the output's unit roundoff u (2^-11 fp16, 2^-8
bf16) beside the default rtol in the same unit.

    python3 benchmarks/half_tolerance_study.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from warpsmith.agent.spec.half_float import HALF_FORMATS, round_to  # noqa: E402
from warpsmith.agent.spec.tolerance import default_rtol  # noqa: E402
from warpsmith.agent.worker.mismatch import relative_error  # noqa: E402


def accumulate(terms: np.ndarray, acc: str) -> np.ndarray:
    """Sum over the last axis, one term at a time, rounding the sum to `acc` each step."""
    total = np.zeros(terms.shape[:-1], np.float32)
    for k in range(terms.shape[-1]):
        if acc == "float32":
            total = (total + terms[..., k].astype(np.float32)).astype(np.float32)
        else:  # the product is exact in float32 (8- or 11-bit factors); the sum is rounded to 16 bits
            total = round_to(total.astype(np.float64) + terms[..., k], acc).astype(np.float32)
    return total


def gemm(a: np.ndarray, b: np.ndarray, acc: str) -> np.ndarray:
    return accumulate(a[:, None, :] * b.T[None, :, :], acc)


def rmsnorm(x: np.ndarray, w: np.ndarray, acc: str) -> np.ndarray:
    ms = accumulate(x * x, acc).astype(np.float32) / np.float32(x.shape[1])
    inv = (np.float32(1) / np.sqrt(ms + np.float32(1e-6))).astype(np.float32)
    return (x.astype(np.float32) * inv[:, None] * w.astype(np.float32)).astype(np.float32)


def main() -> None:
    rng = np.random.default_rng(17)
    print(f"{'what':<28}{'out':>9}{'acc':>9}{'max err/u':>11}{'default rtol/u':>16}  verdict")
    for dtype in ("bfloat16", "float16"):
        u = HALF_FORMATS[dtype].unit_roundoff
        for what, n, make in (("gemm 48x48 K=16", 16, None), ("gemm 48x48 K=256", 256, None),
                              ("gemm 32x32 K=4096", 4096, None), ("rowsum 256 x 1024", 1024, "rowsum"),
                              ("rowsum 64 x 16384", 16384, "rowsum"), ("rmsnorm 64 x 4096", 4096, "rmsnorm")):
            rows = 64 if n >= 4096 else 256
            if make is None:
                m = 32 if n == 4096 else 48
                a = round_to(rng.uniform(-1, 1, (m, n)), dtype)
                b = round_to(rng.uniform(-1, 1, (n, m)), dtype)
                ref = a @ b
                run = (lambda acc, a=a, b=b: gemm(a, b, acc))
            elif make == "rowsum":
                x = round_to(rng.uniform(-1, 1, (rows, n)), dtype)
                ref = x.sum(axis=1)
                run = (lambda acc, x=x: accumulate(x, acc))
            else:
                x = round_to(rng.uniform(-1, 1, (rows, n)), dtype)
                w = round_to(rng.uniform(0.5, 1.5, n), dtype)
                ref = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
                run = (lambda acc, x=x, w=w: rmsnorm(x, w, acc))
            rtol = default_rtol(dtype, n)
            for acc in ("float32", dtype):
                out = round_to(run(acc).astype(np.float64), dtype)
                err = relative_error(out, ref).max()
                verdict = "pass" if err <= rtol else "FAIL"
                print(f"{what:<28}{dtype:>9}{acc:>9}{err / u:>11.3f}{rtol / u:>16.3f}  {verdict}")


if __name__ == "__main__":
    main()
