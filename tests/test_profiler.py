"""Nsight Compute integration on the CPU: the command never touches clocks, a
missing ncu or forbidden counters are one clear error, findings from numbers,
and the raw CSV ncu printed on the H200 (tests/fixtures) parsed into records."""

from pathlib import Path

import pytest

from warpsmith.agent.profiling.profiler import KernelProfile, ProfilerUnavailable, ncu_command, parse_csv

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_command_profiles_one_launch_and_leaves_clocks_alone():
    """--clock-control none, a kernel-name filter, one launch, raw CSV, the curated metrics."""
    cmd = ncu_command("sgemm_naive", ["python3", "run.py"], ncu="/usr/bin/ncu")
    joined = " ".join(cmd)
    assert "--clock-control none" in joined and "--kernel-name regex:sgemm_naive" in joined
    assert "--launch-count 1" in joined and "--csv --page raw" in joined
    assert "dram__bytes_read.sum" in joined and "launch__occupancy_limit_registers" in joined
    assert cmd[-2:] == ["python3", "run.py"]


def test_missing_ncu_is_one_clear_error(monkeypatch):
    """Without ncu on PATH the profiler says so and the run can go on."""
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ProfilerUnavailable, match="not on PATH"):
        ncu_command("k", ["python3"])


def test_counter_permission_error_is_recognised():
    """ERR_NVGPUCTRPERM in ncu's output becomes ProfilerUnavailable, not an empty profile."""
    with pytest.raises(ProfilerUnavailable, match="ERR_NVGPUCTRPERM"):
        parse_csv("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")


def test_findings_name_the_bottleneck():
    """High memory throughput reads as memory bound; a register limit and a stall are named."""
    p = KernelProfile("k", duration_ns=1e6, dram_read_bytes=3e9, memory_throughput_pct=85, sm_throughput_pct=30,
                      achieved_occupancy_pct=12,
                      occupancy_limit_registers=2, occupancy_limit_warps=16, stalls={"long_scoreboard": 9.5, "wait": 1.2})
    f = p.findings()
    assert f[0].startswith("DRAM bandwidth bound") and "memory bound" in f[0]
    assert "low achieved occupancy (limited by registers)" in f
    assert "warps mostly stalled on long scoreboard" in f
    assert "long_scoreboard 9.5" in p.text()


def test_parses_the_csv_ncu_printed_on_the_h200():
    """tests/fixtures: ncu 2025 raw CSV for the sgemm example's kernels on the H200, three cases each."""
    naive = parse_csv((FIXTURES / "ncu-h200-sgemm-naive.csv").read_text())
    tiled = parse_csv((FIXTURES / "ncu-h200-sgemm-tiled.csv").read_text())
    assert [p.kernel for p in naive] == ["sgemm_naive"] * 3 and [p.kernel for p in tiled] == ["sgemm_tiled"] * 3
    n4096, t4096 = naive[1], tiled[1]
    assert n4096.duration_ns == pytest.approx(25_507_700, rel=1e-4)
    assert n4096.registers_per_thread == 32 and t4096.registers_per_thread == 127
    assert t4096.shared_static_bytes == 4096 and n4096.shared_static_bytes == 0
    assert n4096.dram_read_bytes == pytest.approx(7040.7e6, rel=1e-3)
    assert t4096.occupancy_limiter == "registers" and n4096.achieved_occupancy_pct > 90
    assert t4096.top_stalls(1)[0][0] == "short_scoreboard" and n4096.top_stalls(1)[0][0] == "long_scoreboard"
    assert len(n4096.stalls) == 14 and n4096.instructions > 0 and t4096.bank_conflicts > 0


def test_findings_tell_on_chip_from_dram_bound():
    """The tiled SGEMM keeps memory units 89% busy but DRAM at 2%: advice is reuse, not bandwidth."""
    t4096 = parse_csv((FIXTURES / "ncu-h200-sgemm-tiled.csv").read_text())[1]
    first = t4096.findings(bandwidth_gbs=4000.0)[0]
    assert first.startswith("on-chip memory bound") and "DRAM only 2%" in first
    streaming = KernelProfile("copy", duration_ns=1e6, memory_throughput_pct=92, sm_throughput_pct=10,
                              dram_read_bytes=2e9, dram_write_bytes=2e9)
    assert streaming.findings(bandwidth_gbs=4000.0)[0].startswith("DRAM bandwidth bound (100% of it)")
