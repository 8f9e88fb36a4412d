"""Default tolerances: honest fp32 passes, TF32-level error fails unless allowed."""

import numpy as np
import pytest
from workload_factory import SGEMM, make_sgemm_workload

from agent.spec.tolerance import TF32_RTOL, case_rtol, default_rtol
from agent.spec.workload import load_workload
from agent.worker.mismatch import relative_error


def tf32(x):
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x1000) & 0xFFFFE000).view(np.float32)


def sequential_fp32(a, b):
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        c = (c + (a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float32)).astype(np.float32)
    return c


@pytest.mark.parametrize("m,n,k", [(97, 83, 61), (64, 64, 1024), (32, 32, 4096)])
def test_fp32_sequential_sum_passes_and_tf32_fails(m, n, k):
    """The worst honest fp32 order (sequential) passes the default; TF32 inputs fail it."""
    rng = np.random.default_rng(k)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    rtol = default_rtol("float32", k)
    assert relative_error(sequential_fp32(a, b), ref).max() <= rtol
    assert relative_error(sequential_fp32(tf32(a), tf32(b)), ref).max() > 10 * rtol
    assert relative_error(sequential_fp32(tf32(a), tf32(b)), ref).max() <= TF32_RTOL


def test_case_rtol_follows_the_workload(tmp_path):
    """rtol grows with the reduction length, allow_tf32 lifts it, an explicit rtol wins."""
    w = load_workload(SGEMM)
    small, big = w.case("odd-97x83x61"), w.case("square-4096")
    assert case_rtol(w, small, "float32") < case_rtol(w, big, "float32") < 1e-4
    allowed = load_workload(make_sgemm_workload(tmp_path / "a", tolerance="allow_tf32 = true"))
    assert case_rtol(allowed, allowed.case("square-256"), "float32") == TF32_RTOL
    fixed = load_workload(make_sgemm_workload(tmp_path / "b", tolerance="rtol = 1e-3"))
    assert case_rtol(fixed, fixed.case("square-256"), "float32") == 1e-3
    assert case_rtol(w, small, "int32") == 0.0
