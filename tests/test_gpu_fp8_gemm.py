"""On a Hopper GPU: the fp8_gemm example end to end. Its kernels (naive, mma.sync e4m3,
wgmma fed by TMA at its defaults and at knob points: multicast clusters, 256-row tiles,
one CTA per tile, promotion every k-block, every 4, never) pass every correctness case,
the accumulation probe (K = 2^22) included, and a mid-size performance case; the
e4m3 bytes reach TMA and PyTorch as what they are; torch._scaled_mm passes the same
checks; and the reason promotion exists, Hopper's fp8 wgmma keeping about 14 bits in its
accumulator, shows on the probe."""

from __future__ import annotations

from dataclasses import replace

import pytest
from workload_factory import ROOT

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.accumulation_probe import probe_name
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import Case, load_workload
from warpsmith.agent.worker.protocol import TimingConfig
from warpsmith.agent.worker.status import Status
from warpsmith.agent.worker.torch_baseline import torch_available

pytestmark = pytest.mark.gpu

TIMING = EvaluationOptions(TimingConfig(warmup=1, repetitions=3), kernel_timeout_s=20.0)
PROBE = probe_name("K")
# One tile-ragged performance case (validated and timed): the real ones' references take minutes on the CPU.
MID = Case("mid-1999x2064x3088", "performance", {"M": 1999, "N": 2064, "K": 3088})
WGMMA_POINTS = [{}, {"CLUSTER": 2}, {"PROMOTE": 4, "CLUSTER": 2}, {"PROMOTE": 0, "BN": 256, "STAGES": 4},
                {"BM": 256, "BN": 64, "STAGES": 5}, {"BN": 64, "STAGES": 7, "PERSISTENT": 0}]


@pytest.fixture(scope="module")
def workload():
    w = load_workload(ROOT / "examples" / "fp8_gemm")
    return replace(w, cases=tuple(c for c in w.cases if not c.timed) + (MID,))


@pytest.fixture(scope="module")
def evaluator(workload):
    with Evaluator(workload, TIMING) as ev:
        if ev.facts.cc_major < 9:
            pytest.skip("needs compute capability 9.0 (Hopper): fp8 tensor cores, wgmma, TMA")
        yield ev


def _passes_everything(workload, result):
    assert result.ok, (result.status, result.detail)
    assert {c.case for c in result.cases} >= {c.name for c in workload.cases}
    assert result.case(PROBE).status == Status.OK


@pytest.mark.parametrize("kernel", ["naive", "mma_sync"])
def test_the_simple_kernels_pass_every_case_and_the_probe(workload, evaluator, kernel):
    """The starting kernel (fp32 FMAs on widened e4m3) and the mma.sync e4m3 kernel pass every case."""
    _passes_everything(workload, evaluator.evaluate(Candidate.from_spec(workload.kernels[kernel])))


@pytest.mark.parametrize("knobs", WGMMA_POINTS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "defaults")
def test_wgmma_ws_passes_every_case_and_the_probe(workload, evaluator, knobs):
    """wgmma.m64nNk32.e4m3 fed by TMA boxes of e4m3 bytes (the runner's UINT8 tensor maps), edges zero-filled,
    scaled and rounded to bf16: every case passes at each point, PROMOTE=0 included where K is short."""
    result = evaluator.evaluate(Candidate.from_spec(workload.kernels["wgmma_ws"], knobs))
    if knobs.get("PROMOTE") == 0:  # the probe is the next test's subject
        assert all(c.status == Status.OK for c in result.cases if c.case != PROBE), result.detail
        return
    _passes_everything(workload, result)


def test_without_promotion_the_probe_fails_and_with_it_passes(workload, evaluator):
    """2^22 products of 1 summed by one wgmma accumulator stall if it keeps about 14 bits (the DeepSeek-V3
    report's measurement, benchmarks/fp8_tolerance_study.py's emulation: 112 u of bf16); promoted every
    k-block into fp32 registers the sum is exact. What this GPU does either way is the finding."""
    probe_only = replace(workload, cases=tuple(c for c in workload.cases if c.name == PROBE) + (MID,))
    spec = workload.kernels["wgmma_ws"]
    with Evaluator(probe_only, TIMING) as ev:
        unpromoted = ev.evaluate(Candidate.from_spec(spec, {"PROMOTE": 0}), time_cases=False)
        promoted = ev.evaluate(Candidate.from_spec(spec, {"PROMOTE": 1}), time_cases=False)
    assert promoted.case(PROBE).status == Status.OK, promoted.detail
    assert unpromoted.case(PROBE).status == Status.WRONG_ANSWER, unpromoted.detail


@pytest.mark.skipif(not torch_available(), reason="needs PyTorch")
@pytest.mark.parametrize("kind", ["torch_eager", "torch_compile"])
def test_the_scaled_mm_baseline_passes_the_same_checks(evaluator, kind):
    """torch._scaled_mm on the worker's own buffers viewed as torch.float8_e4m3fn passes every case and is timed."""
    assert kind in evaluator.baseline_kinds()
    result = evaluator.baseline(kind=kind)
    assert result is not None and result.ok, (result.status if result else None, result.detail if result else "")
    assert result.score_ms and result.score_ms > 0
