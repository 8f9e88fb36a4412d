"""The exact probe (agent/spec/exact_probe.py): inputs an fp32-accurate GEMM sums
exactly in any order, at every performance case's sizes, with a tolerance that does not
grow with K. Emulated in NumPy: honest fp32 orders and 3xTF32 pass, a split of the
inputs into 16-bit pieces (what the fp32 rule alone passes at long K) fails."""

from __future__ import annotations

import numpy as np
import pytest
from workload_factory import ROOT

from agent.spec.exact_probe import EXACT_RTOL
from agent.spec.inputs import ArrayJob, generate_input
from agent.spec.tolerance import case_rtol
from agent.spec.workload import load_workload
from agent.spec.workload_model import SpecError


def error(out: np.ndarray, ref: np.ndarray) -> float:
    """The harness's measure: |out - ref| / (|ref| + rms(ref)), worst element."""
    return float(np.max(np.abs(out - ref) / (np.abs(ref) + np.sqrt(np.mean(ref ** 2)))))


def round_significand(x: np.ndarray, bits: int) -> np.ndarray:
    """x rounded to `bits` significant bits (nearest)."""
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(np.round(m * 2.0 ** bits) / 2.0 ** bits, e)


def probe_inputs(m: int, n: int, k: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    a = generate_input(ArrayJob("A", "input", "float32", (m, k), -1, 1, exact="wide", reduction=k), "p", seed)
    b = generate_input(ArrayJob("B", "input", "float32", (k, n), -1, 1, exact="sign", reduction=k), "p", seed)
    return a, b


def test_every_performance_case_gets_a_probe_at_its_sizes():
    for name in ("sgemm", "gemm_bias_relu"):
        w = load_workload(ROOT / "examples" / name)
        timed = {c.name: c.sizes for c in w.cases if c.timed}
        probes = {c.name.removeprefix("exact-probe-"): c for c in w.cases if c.exact}
        assert probes.keys() == timed.keys()
        for perf, probe in probes.items():
            assert probe.sizes == timed[perf] and probe.role == "correctness"
            assert case_rtol(w, probe, "float32") == EXACT_RTOL


@pytest.mark.parametrize("k", [256, 4096, 131072])
def test_honest_fp32_and_3xtf32_are_exact_and_a_16_bit_split_fails(k):
    a, b = probe_inputs(32, 16, k)
    assert np.all(np.abs(a) >= 2 ** 16) and np.all(np.abs(a) < 2 ** 17) and np.all(np.abs(a) % 2 == 1)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(ref)) < 2 ** 24  # every partial sum stays exact in float32 here
    honest = [a @ b,  # BLAS's float32 order
              np.add.reduce(a[:, :, None] * b[None, :, :], axis=1, dtype=np.float32),  # pairwise
              sum((a[:, i::8] @ b[i::8, :] for i in range(8)), np.zeros((32, 16), np.float32))]  # split-K, 8 ways
    for out in honest:
        assert error(out, ref) == 0.0
    big = round_significand(a, 11)  # 3xTF32: two 11-bit pieces hold the 17-bit values exactly
    small = round_significand(a - big, 11)
    assert error((big @ b + small @ b).astype(np.float32), ref) == 0.0
    split16 = round_significand(a, 16)  # bf16x3: 8 + 8 significant bits
    assert error((split16 @ b).astype(np.float32), ref) > 4 * EXACT_RTOL


def test_the_fp32_rule_alone_passes_the_16_bit_split_at_long_k():
    """Why the probe exists: on the workload's random inputs the 16-bit split is within
    8 u sqrt(K) at K = 4096 (the emulation behind agent/spec/exact_probe.py)."""
    rng = np.random.default_rng(0)
    k = 4096
    a = rng.uniform(-1, 1, (32, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, 32)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    lossy = round_significand(a, 16) @ round_significand(b, 16)
    assert error(lossy, ref) < 8 * 2.0 ** -24 * np.sqrt(k)


def test_the_probe_is_refused_where_it_cannot_hold(tmp_path):
    import shutil
    shutil.copytree(ROOT / "examples" / "sgemm", tmp_path / "w")
    toml = tmp_path / "w" / "workload.toml"
    toml.write_text(toml.read_text().replace("allow_tf32 = false", "allow_tf32 = true", 1))
    with pytest.raises(SpecError, match="tolerance.exact_probe: an exact probe checks float32 accuracy"):
        load_workload(tmp_path / "w")
