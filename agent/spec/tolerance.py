"""How close a kernel's output must be to the float64 reference.

The error of element i is ``|out_i - ref_i| / (|ref_i| + s)``, where s is the RMS
of the reference over the case: entries of a sum that cancel to near zero are
judged on the output's scale, not on their own tiny magnitude. An output passes
when every element's error is within ``rtol`` and it is finite where the
reference is.

Default rtol = 8 * eps(dtype) * sqrt(reduction length). Measured on the CPU
(scripts in benchmarks/tolerance_study.py): a sequential fp32 dot product reaches
about 1 * eps * sqrt(K) (K = 61 .. 4096), TF32 inputs about 8e-4 whatever K.
So for fp32 the default passes any honest fp32 summation order and rejects
TF32 by more than 20x at K = 4096. ``allow_tf32`` raises the bound to 4e-3.
"""

from __future__ import annotations

import math

import numpy as np

from .workload import Case, Workload

EPS = {"float32": 2.0**-24, "float64": 2.0**-53}
TF32_RTOL = 4e-3


def default_rtol(dtype: str, reduction: float) -> float:
    return 8.0 * EPS[dtype] * math.sqrt(max(1.0, reduction))


def case_rtol(workload: Workload, case: Case, dtype: str) -> float:
    """rtol for an output of `dtype` in `case`; 0 means exact (integers)."""
    if np.dtype(dtype).kind != "f":
        return 0.0
    t = workload.tolerance
    if t.rtol is not None:
        return t.rtol
    reduction = t.reduction.evaluate(case.sizes) if t.reduction is not None else 1.0
    rtol = default_rtol(dtype, reduction)
    return max(rtol, TF32_RTOL) if t.allow_tf32 and dtype == "float32" else rtol
