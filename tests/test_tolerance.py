"""Default tolerances: honest fp32 passes, TF32-level error fails unless allowed; the element
comparison's NumPy and CUDA renderings agree."""

import shutil
import subprocess

import numpy as np
import pytest
from workload_factory import SGEMM, make_sgemm_workload

from warpsmith.agent.spec.tolerance import (
    COMPARISON_CUDA,
    DENOMINATOR_FLOOR,
    TF32_RTOL,
    case_rtol,
    default_rtol,
    error_on_scale,
    relative_error,
)
from warpsmith.agent.spec.workload import load_workload


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


def test_scale_is_the_rms_of_the_finite_entries_without_overflow():
    """One infinity or NaN must not make the case's scale inf or NaN (every honest output of an
    allow_nonfinite workload failed), nor one huge entry square past float64 (any finite output
    then passed)."""
    from warpsmith.agent.spec.tolerance import scale
    x = np.array([3.0, -4.0, 0.0, 0.0])
    assert scale(x) == pytest.approx(np.sqrt(np.mean(np.square(x))))
    assert scale(np.append(x, [np.inf, -np.inf, np.nan])) == pytest.approx(np.sqrt(25 / 4))
    huge = np.array([1e200, -1e200])
    assert scale(huge) == pytest.approx(1e200)
    assert scale(np.array([np.nan])) == 0.0 and scale(np.zeros(3)) == 0.0 and scale(np.array([])) == 0.0


def test_a_huge_reference_entry_does_not_let_any_output_pass():
    """Its square overflowed the scale to inf, and every error to 0."""
    ref = np.array([2e154, 1.0, 2.0])
    err = relative_error(np.array([1e154, 1.0, 2.0]), ref)
    assert err[0] > 0.3 and err[1] == 0 and err[2] == 0


def test_an_infinite_reference_entry_wants_the_same_infinity():
    ref = np.array([np.inf, -np.inf, 1.0, 2.0])
    ok = relative_error(np.array([np.inf, -np.inf, 1.0, 2.0]), ref)
    assert (ok == 0).all()
    wrong = relative_error(np.array([-np.inf, 5.0, 1.0, np.inf]), ref)
    assert not (wrong[:2] <= 1).any() and wrong[2] == 0 and not wrong[3] <= 1


def test_nan_for_nan_passes_and_nan_elsewhere_fails():
    """A NaN output passes where the reference is NaN (error 0), and fails everywhere else."""
    ref = np.array([np.nan, 1.0, np.nan])
    err = relative_error(np.array([np.nan, np.nan, 1.0]), ref)
    assert err[0] == 0 and not err[1] <= 1 and not err[2] <= 1


COMPARISON_MAIN = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
using std::fabs; using std::isinf; using std::isnan;
int main() {
  unsigned long long bits[3];
  while (std::scanf("%llx %llx %llx", &bits[0], &bits[1], &bits[2]) == 3) {
    double o, r, scale;
    std::memcpy(&o, &bits[0], 8); std::memcpy(&r, &bits[1], 8); std::memcpy(&scale, &bits[2], 8);
    const double err = WS_SAME_NONFINITE(o, r) ? 0.0 : WS_RELATIVE_ERROR(o, r, scale);
    unsigned long long out;
    std::memcpy(&out, &err, 8);
    std::printf("%llx\n", out);
  }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_the_cuda_comparison_gives_what_relative_error_gives(tmp_path):
    """COMPARISON_CUDA (the GPU check's macros, compiled here as C++; a skipped element
    counts as 0) and relative_error agree bit for bit, special values included."""
    src = tmp_path / "comparison.cpp"
    src.write_text(COMPARISON_CUDA + COMPARISON_MAIN)
    exe = tmp_path / "comparison"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True)
    rng = np.random.default_rng(5)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-310, 1e300, np.finfo(np.float64).max])
    out = np.concatenate([np.repeat(special, special.size), rng.normal(size=500) * 10.0 ** rng.integers(-30, 30, 500)])
    ref = np.concatenate([np.tile(special, special.size), rng.normal(size=500) * 10.0 ** rng.integers(-30, 30, 500)])
    scales = np.concatenate([np.zeros(special.size ** 2), rng.uniform(0, 2, 500)])
    lines = [f"{int(o):x} {int(r):x} {int(s):x}" for o, r, s in
             zip(out.view(np.uint64), ref.view(np.uint64), scales.view(np.uint64))]
    got = subprocess.run([str(exe)], input="\n".join(lines), text=True, capture_output=True, check=True).stdout.split()
    device = np.array([int(v, 16) for v in got], dtype=np.uint64).view(np.float64)
    host = error_on_scale(out, ref, scales)
    same = (device == host) | (np.isnan(device) & np.isnan(host))
    assert same.all(), [(out[i], ref[i], device[i], host[i]) for i in np.flatnonzero(~same)[:5]]
    assert repr(DENOMINATOR_FLOOR) in COMPARISON_CUDA


def test_row_scales_are_each_rows_finite_rms():
    """scale = "row": one scale per row of the last axis, each as `scale` computes it, with
    the case's single scale otherwise; a row of zeros or non-finite values scales by 0."""
    from warpsmith.agent.spec.tolerance import row_length, scale, scales
    ref = np.array([[3.0, -4.0], [1e200, np.inf], [0.0, np.nan]])
    assert scales(ref, per_row=True) == pytest.approx([scale(ref[0]), 1e200, 0.0])
    assert scales(ref) == pytest.approx([scale(ref)])
    assert row_length(ref.shape, True) == 2 and row_length(ref.shape, False) == 6


def test_a_row_scale_judges_a_small_row_on_its_own_size():
    """A row a thousand times smaller than the rest: a 1% error there hides under the case's
    RMS and fails on the row's own, where errors proportional to each row pass both ways."""
    ref = np.array([[1000.0, -1000.0, 1000.0], [1.0, -1.0, 1.0]])
    small_row_off = ref + np.array([[0.0, 0.0, 0.0], [0.01, 0.01, 0.01]])
    assert relative_error(small_row_off, ref).max() < 1e-4
    assert relative_error(small_row_off, ref, per_row=True).max() > 4e-3
    proportional = ref * (1 + 1e-6)
    assert relative_error(proportional, ref, per_row=True).max() <= 1e-6
