"""Floor arithmetic: FLOPs over the rate, bytes over the bandwidth, suspects below the floor."""

import pytest
from workload_factory import SGEMM

from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.speed_of_light import Ceilings, case_floor, load_ceilings, save_ceilings
from warpsmith.agent.spec.workload import load_workload

H200 = Ceilings(4300.0, 60.0, "test")


def test_sgemm_4096_is_compute_bound():
    """2*4096^3 FLOP at 60 TFLOP/s is 2.29 ms; 201 MB at 4.3 TB/s is 0.047 ms: compute bound."""
    w = load_workload(SGEMM)
    f = case_floor(w, w.case("square-4096"), H200, median_ms=3.8879)
    assert f.bound == "compute"
    assert f.floor_ms == pytest.approx(2 * 4096**3 / 60e12 * 1e3)
    assert f.pct_of_floor == pytest.approx(f.floor_ms / 3.8879) and not f.suspect


def test_faster_than_the_floor_is_suspect():
    """A median 10% under the physical floor is flagged, 1% under is noise."""
    w = load_workload(SGEMM)
    floor = case_floor(w, w.case("square-1024"), H200).floor_ms
    assert case_floor(w, w.case("square-1024"), H200, floor * 0.90).suspect
    assert not case_floor(w, w.case("square-1024"), H200, floor * 0.99).suspect


def test_ceilings_cache_by_gpu_and_datasheet_fallback():
    """Measured ceilings are cached per GPU UUID; an H200 without them gets the datasheet lead."""
    facts = DeviceFacts(name="NVIDIA H200", uuid="GPU-test-0000")
    assert load_ceilings(facts).source == "datasheet"
    save_ceilings(facts, Ceilings(4310.0, 61.5, "measured"))
    assert load_ceilings(facts) == Ceilings(4310.0, 61.5, "measured")
    assert load_ceilings(DeviceFacts(name="Some GPU", uuid="x")) is None


def test_eval_table_shows_percent_of_floor_and_its_source():
    """The eval table adds '% floor' per timed case and names where the ceilings came from."""
    from warpsmith.agent.evaluate.results import CaseResult, EvaluationResult
    from warpsmith.agent.evaluate.stats import TimingStats
    from warpsmith.agent.tracking.report import render_table
    from warpsmith.agent.worker.protocol import CaseCheck
    w = load_workload(SGEMM)
    cases = [CaseResult(c.name, c.role, "ok", check=CaseCheck("ok", 1e-7, 1e-7),
                        timing=TimingStats.of([3.8879] * 10) if c.name == "square-4096" else None) for c in w.cases]
    text = render_table(w, EvaluationResult("tiled", "ok", None, cases), None, H200)
    row = next(line for line in text.splitlines() if line.startswith("square-4096"))
    assert f"{2 * 4096**3 / 60e12 * 1e3 / 3.8879 * 100:.0f}% com" in row
    assert "60 TFLOP/s fp32 and 4300 GB/s (test)" in text


def test_ceiling_probe_kernels_compile_for_sm_90():
    """The copy, read and FMA probes the worker times once per GPU compile with NVRTC, no spills."""
    from warpsmith.agent.runtime.compiler import compile_kernel
    from warpsmith.agent.worker.ceilings_probe import PROBE_SOURCE
    for entry in ("ws_copy", "ws_read", "ws_fma"):
        r = compile_kernel(PROBE_SOURCE, entry, "sm_90", use_cache=False)
        assert r.ok, r.log
        assert r.resources.spill_stores == 0 and r.resources.registers > 0


def test_a_read_only_case_is_floored_by_the_read_rate():
    """rowsum's 32768x4096 case reads 537 MB and writes 128 KB: at a read rate of 4500 GB/s its floor is its bytes
    over 4500, not over the copy rate, so a kernel reading at 4400 GB/s (above the copy rate) is not suspect."""
    from workload_factory import ROOT
    w = load_workload(ROOT / "examples" / "rowsum")
    case = w.case("32768x4096")
    measured = Ceilings(4246.0, 60.5, "test", read_gbs=4500.0)
    total = float(w.bytes.evaluate(case.sizes))
    reads, writes = 32768 * 4096 * 4, 32768 * 4
    expected = (2 * writes / 4246e9 + (reads - writes) / 4500e9) * 1e3
    assert case_floor(w, case, measured).floor_ms == pytest.approx(expected * total / (reads + writes))
    at_4400 = total / 4400e9 * 1e3
    assert case_floor(w, case, Ceilings(4246.0, 60.5, "test"), at_4400).suspect  # judged at the copy rate alone
    assert not case_floor(w, case, measured, at_4400).suspect


def test_a_read_only_case_that_skips_work_is_still_suspect():
    """The read rate lowers a read-bound floor, not the check: rowsum at 0.9x its floor at the measured read
    rate (a kernel skipping a tenth of its reads) is refused; an absurd cached read rate (inf, 100x the copy)
    counts as at most READ_OVER_COPY x the copy rate, never as free reads."""
    import math

    from workload_factory import ROOT

    from warpsmith.agent.spec.speed_of_light import READ_OVER_COPY
    w = load_workload(ROOT / "examples" / "rowsum")
    case = w.case("32768x4096")
    measured = Ceilings(4246.0, 60.5, "test", read_gbs=4500.0)
    floor = case_floor(w, case, measured).floor_ms
    assert case_floor(w, case, measured, floor * 0.9).suspect
    for absurd in (math.inf, 424600.0):
        f = case_floor(w, case, Ceilings(4246.0, 60.5, "test", read_gbs=absurd)).floor_ms
        assert f >= case_floor(w, case, Ceilings(4246.0, 60.5, "test", read_gbs=READ_OVER_COPY * 4246.0)).floor_ms * 0.999
        assert f > 0


def test_the_memory_floor_is_exact_at_a_copy_and_never_above_the_copy_rule():
    """Equal reads and writes go at the copy rate whatever the read rate; more writes than reads never get a
    higher floor than every byte at the copy rate; no read rate (or one below the copy's) is the old rule."""
    c = Ceilings(4000.0, 60.0, "test", read_gbs=5000.0)
    copy_rule = lambda r, w: (r + w) / 4000e9 * 1e3
    assert c.memory_ms(1e9, 1e9) == pytest.approx(copy_rule(1e9, 1e9))
    assert c.memory_ms(1e9, 0) == pytest.approx(1e9 / 5000e9 * 1e3)
    for r, w in ((1e9, 3e9), (3e9, 1e9), (0, 2e9), (2e9, 0)):
        assert c.memory_ms(r, w) <= copy_rule(r, w) + 1e-12
    assert Ceilings(4000.0, 60.0, "test").memory_ms(3e9, 1e9) == pytest.approx(copy_rule(3e9, 1e9))
    assert Ceilings(4000.0, 60.0, "test", read_gbs=3000.0).memory_ms(3e9, 1e9) == pytest.approx(copy_rule(3e9, 1e9))


def test_a_ceilings_cache_without_the_read_rate_is_read_and_measured_again(tmp_path, monkeypatch):
    """A cache written before the read probe loads (old JSON keys only) with read_gbs None, and ensure_ceilings
    measures again rather than keep it; a complete cache is kept; one whose read rate is Infinity, 0 or -1 is
    measured again."""
    import json

    from warpsmith.agent.spec import speed_of_light
    from warpsmith.agent.worker import ceilings_probe
    monkeypatch.setattr(speed_of_light, "cache_root", lambda: tmp_path)
    facts = DeviceFacts(name="NVIDIA H200", uuid="GPU-test-read")
    speed_of_light.ceilings_path(facts.uuid).parent.mkdir(parents=True)
    speed_of_light.ceilings_path(facts.uuid).write_text(json.dumps(
        {"bandwidth_gbs": 4246.0, "fp32_tflops": 60.5, "source": "measured on this GPU 2026-12-03", "tensor_tflops": 1070.5}))
    assert load_ceilings(facts).read_gbs is None
    fresh = Ceilings(4247.0, 60.6, "measured on this GPU 2026-12-04", 1070.5, read_gbs=4480.0)
    measured = []
    monkeypatch.setattr(ceilings_probe, "measure_ceilings", lambda device, f: measured.append(f) or fresh)
    assert ceilings_probe.ensure_ceilings(None, facts) == fresh and len(measured) == 1
    assert ceilings_probe.ensure_ceilings(None, facts) == fresh and len(measured) == 1  # cached now
    for unusable in ("Infinity", "0", "-1"):  # json.loads reads Infinity; none of these is a rate
        speed_of_light.ceilings_path(facts.uuid).write_text(
            '{"bandwidth_gbs": 4246.0, "fp32_tflops": 60.5, "source": "measured", "read_gbs": %s}' % unusable)
        ceilings_probe.ensure_ceilings(None, facts)
    assert len(measured) == 4


def test_clocks_without_nvml_read_nothing():
    """No NVML on this machine (or a GPU it does not know): timings go without clocks, no error."""
    from warpsmith.agent.worker.clocks import Clocks
    assert Clocks("GPU-00000000-0000-0000-0000-000000000000").read() is None
    assert Clocks("GPU-x", library="libnot-there.so").read() is None


def test_16_bit_workloads_are_floored_by_the_tensor_core_peak_not_fp32_fma():
    """bf16 GEMM on an H200: 132 SMs x 2048 FMA x 2 x 1.98 GHz = 1070.5 TFLOP/s; the wgmma
    kernel's 501 TFLOP/s (measured) is then 47% of the floor, not 'faster than physics' as
    against 60.5 TFLOP/s of fp32 FMA. TF32 workloads get half; fp32 ones keep the FMA rate."""
    from dataclasses import replace

    from workload_factory import ROOT

    from warpsmith.agent.runtime.device_facts import DeviceFacts
    from warpsmith.agent.spec.speed_of_light import Ceilings, case_floor, compute_ceiling, tensor_peak_tflops
    from warpsmith.agent.spec.workload import load_workload
    h200 = DeviceFacts(name="NVIDIA H200", arch="sm_90", cc_major=9, cc_minor=0, sm_count=132, sm_clock_khz=1980000)
    assert tensor_peak_tflops(h200) == 1070.5
    assert tensor_peak_tflops(DeviceFacts(cc_major=7, cc_minor=5, sm_count=40, sm_clock_khz=1590000)) is None
    c = Ceilings(4274.5, 60.5, "measured", tensor_peak_tflops(h200))
    bf16 = load_workload(ROOT / "examples" / "bf16_gemm")
    case = bf16.case("square-4096")
    floor = case_floor(bf16, case, c, 0.2739)
    assert compute_ceiling(bf16, c) == (1070.5, "16-bit tensor core")
    assert not floor.suspect and floor.pct_of_floor == pytest.approx(2 * 4096 ** 3 / 1070.5e12 * 1e3 / 0.2739)
    sgemm = load_workload(ROOT / "examples" / "sgemm")
    # sgemm names the 3xTF32 split, which the machine-code policy allows and nothing narrower:
    # three TF32 products per product, TF32 at half the 16-bit rate.
    assert compute_ceiling(sgemm, c) == (pytest.approx(1070.5 / 6), "3xTF32 tensor core")
    assert case_floor(sgemm, sgemm.case("square-4096"), c, 0.7).suspect  # 196 TFLOP/s is refused
    assert not case_floor(sgemm, sgemm.case("square-4096"), c, 2.5331).suspect  # tf32x3's 54.3 TFLOP/s (H200)
    plain = replace(sgemm, tolerance=replace(sgemm.tolerance, splits=()))
    assert compute_ceiling(plain, c) == (60.5, "fp32")  # no split named: the FFMA rate
    assert case_floor(plain, plain.case("square-4096"), c, 2.0).suspect  # 68.7 TFLOP/s of fp32 is refused
    assert compute_ceiling(sgemm, replace(c, tensor_tflops=None)) == (60.5, "fp32")
