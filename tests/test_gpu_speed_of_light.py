"""On a real GPU: the measured ceilings, and Nsight Compute through warpsmith's profiler."""

from __future__ import annotations

import shutil

import pytest
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.records import CandidateSpec
from warpsmith.agent.profiling.nsight import Nsight
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return load_workload(make_sgemm_workload(tmp_path_factory.mktemp("sgemm")))


def test_worker_measures_ceilings_near_the_datasheet(workload):
    """Copy bandwidth between half and all of the bus's peak; the FMA rate between a
    quarter and 1.1x of SMs x 128 lanes x 2 FLOP x the reported SM clock."""
    with Evaluator(workload) as ev:
        c, f = ev.ceilings, ev.facts
    assert c.source.startswith("measured")
    assert 0.5 * f.peak_bandwidth_gbs < c.bandwidth_gbs <= 1.0 * f.peak_bandwidth_gbs
    fma_peak = f.sm_count * 128 * 2 * f.sm_clock_khz * 1e3 / 1e12
    assert 0.25 * fma_peak < c.fp32_tflops < 1.1 * fma_peak
    print(f"ceilings: {c}")


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")
def test_nsight_profiles_each_performance_case(workload, tmp_path):
    spec = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["naive"]), "start")
    cases = [c.name for c in workload.cases if c.timed]
    profiles = Nsight(workload.directory, tmp_path).profile(spec, cases)
    assert [p.case for p in profiles] == cases
    for p in profiles:
        print(p.summary)
        assert p.metrics["duration_ns"] > 0 and p.metrics["instructions"] > 0
        assert p.metrics["registers_per_thread"] > 0 and p.findings


def test_timed_cases_carry_the_clocks_read_before_and_after(workload):
    """NVML's SM and memory clocks around every timed case (the H200 runs near 1980 / 3201 MHz)."""
    from warpsmith.agent.spec.candidate import Candidate
    with Evaluator(workload) as ev:
        r = ev.evaluate(Candidate.from_spec(workload.kernels["naive"]))
    timed = [c for c in r.cases if c.timing]
    assert timed and all(len(c.clocks_mhz) == 4 and min(c.clocks_mhz) > 100 for c in timed)
    print({c.case: c.clocks_mhz for c in timed})
