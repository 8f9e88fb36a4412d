"""benchmarks/tensor_ceiling.py without a GPU: every probe kernel compiles with the real
NVRTC (wgmma ones for sm_90a) with no spills and fits its CTAs per SM, the FLOP counts
are right, and a missing GPU is one line and exit 2. The rates are measured on the H200."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.speed_of_light import TENSOR_FMA_PER_SM_CLOCK, tensor_peak_tflops

ROOT = Path(__file__).resolve().parents[1]
H200_REGS_PER_SM, H200_SMEM_PER_SM, H200_SMEM_OPTIN = 65536, 228 * 1024, 227 * 1024


def _script():
    spec = importlib.util.spec_from_file_location("tensor_ceiling", ROOT / "benchmarks" / "tensor_ceiling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tc = _script()


@pytest.mark.parametrize("probe", tc.PROBES, ids=lambda p: p.label())
def test_probe_compiles_without_spills_and_fits(probe):
    r = tc.compile_probe(probe, "sm_90", use_cache=False)
    assert r.ok, r.log
    assert r.arch == ("sm_90a" if probe.kind == "wgmma" else "sm_90")
    assert r.resources.spill_stores == 0 and r.resources.spill_loads == 0 and r.resources.stack_bytes == 0, \
        r.resources.text()
    assert "serialized" not in r.log, r.log  # ptxas's "wgmma ... serialized" performance warning
    # The CTAs per SM the grid assumes are resident at once: registers and shared memory.
    allocated = -(-r.resources.registers // 8) * 8  # registers are allocated 8 a thread at a time
    assert allocated * probe.threads * probe.per_sm <= H200_REGS_PER_SM, r.resources.text()
    assert probe.shared_bytes <= H200_SMEM_OPTIN and probe.shared_bytes * probe.per_sm <= H200_SMEM_PER_SM
    print(f"{probe.kind} {probe.label()}: {r.arch}, {r.resources.text()}")


def test_wgmma_tiles_fill_exactly_the_shared_memory_asked_for():
    """What the descriptors read (each warpgroup's 64 x 64 A tile, then N/64 64 x 64 boxes of
    B, bf16; for fp8 the same bytes: 64 x 128 and N x 128) plus the 1 KiB alignment slack is
    the dynamic shared memory launched with."""
    for p in (q for q in tc.PROBES if q.kind == "wgmma"):
        assert p.shared_bytes == p.warpgroups * 64 * 64 * 2 + 64 * p.n * 2 + 1024


def test_flop_counts():
    assert tc.wgmma_flops_per_instruction(256) == 2 * 64 * 256 * 16 == 524288
    assert tc.wgmma_flops_per_instruction(128) == 262144
    # Hopper: 2048 dense bf16 FMAs per SM per clock, so one m64n256k16 is 128 clocks of an SM.
    assert tc.wgmma_flops_per_instruction(256) // 2 // TENSOR_FMA_PER_SM_CLOCK[(9, 0)] == 128
    assert tc.wgmma_flops(256, blocks=132, warpgroups=2, iters=10) == 132 * 2 * 10 * 4 * 524288
    assert tc.Probe("wgmma", 128, 3, 1).flops(blocks=2, iters=5) == 2 * 3 * 5 * 4 * 262144
    assert tc.mma_sync_flops(blocks=1, threads=256, iters=1, chains=8) == 8 * 8 * 2 * 16 * 8 * 16
    assert tc.Probe("mma.sync", 0, 0, 2, chains=16).flops(blocks=3, iters=7) == 3 * 8 * 7 * 16 * 4096
    assert tc.gemm_flops(8192, 8192, 8192) == 2 * 8192 ** 3
    # fp8: K = 32 a wgmma, twice the work in the same 32 bytes of each swizzle row.
    assert tc.wgmma_flops_per_instruction(256, "fp8") == 2 * 64 * 256 * 32
    assert tc.Probe("wgmma", 256, 2, 1, dtype="fp8").flops(blocks=2, iters=5) == 2 * 2 * 5 * 4 * 1048576


def test_the_fp8_probes_multiply_e4m3_with_both_operands_k_major():
    fp8 = [p for p in tc.PROBES if p.dtype == "fp8"]
    assert fp8 and all(p.kind == "wgmma" for p in fp8)
    for p in fp8:
        assert f"m64n{p.n}k32.f32.e4m3.e4m3" in p.source and "p, 1, 1;" in p.source
        assert "#define FP8 1" in p.source
    assert all("#define FP8 0" in p.source for p in tc.PROBES if p.kind == "wgmma" and p.dtype == "bf16")


def test_launches_are_long_enough_to_time():
    """Each probe's loop trips make a launch of about TARGET_FLOP (ms, not us, at the peak)."""
    for p in tc.PROBES:
        blocks = 132 * p.per_sm
        assert abs(p.flops(blocks, p.iters_for(blocks)) / tc.TARGET_FLOP - 1) < 0.01


def test_clock_peak_of_the_h200():
    facts = DeviceFacts(name="NVIDIA H200", cc_major=9, cc_minor=0, sm_count=132, sm_clock_khz=1980000)
    assert tensor_peak_tflops(facts) == 1070.5


def test_no_gpu_is_one_line_and_exit_2(monkeypatch, capsys):
    from warpsmith.agent.runtime import native

    def no_gpu(ordinal=0):
        raise RuntimeError("cuInit failed: no CUDA-capable device is detected")
    monkeypatch.setattr(native, "open_device", no_gpu)
    assert tc.main() == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no usable GPU" in out
