"""Nsight Compute integration on the CPU: the command never touches clocks, a
missing ncu or forbidden counters are one clear error, findings from numbers.
(Parsing a recorded ncu CSV from the H200 is still to come: see the README's status.)"""

import pytest

from agent.profiler import KernelProfile, ProfilerUnavailable, ncu_command, parse_csv


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
    p = KernelProfile("k", memory_throughput_pct=85, sm_throughput_pct=30, achieved_occupancy_pct=12,
                      occupancy_limit_registers=2, occupancy_limit_warps=16, stalls={"long_scoreboard": 9.5, "wait": 1.2})
    f = p.findings()
    assert f[0].startswith("memory bound")
    assert "low achieved occupancy (limited by registers)" in f
    assert "warps mostly stalled on long scoreboard" in f
    assert "long_scoreboard 9.5" in p.text()
