"""On a Hopper GPU: attention_bf16's fa3 kernel (wgmma for both products, Q/K/V by TMA from
(BH * S) x D descriptors, a producer warpgroup and two consumers) passes every correctness
case (one token, ragged S, both head dimensions, causal and not, the large-input stress
case) and a long causal case (64 key blocks: the ring wraps many times, most blocks skip
the mask), validated and timed, at its defaults and at knob points that switch each
schedule off (OVERLAP, PINGPONG), shorten the key block and deepen the ring; and SDPA's
flash and cuDNN backends pass the same checks as baselines (cuDNN not applicable where the
installed PyTorch lacks it)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from workload_factory import ROOT

from warpsmith.agent.evaluate.evaluator import FRESH_SEED, Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import Case, load_workload
from warpsmith.agent.worker.protocol import TimingConfig
from warpsmith.agent.worker.status import Status
from warpsmith.agent.worker.torch_baseline import torch_available

pytestmark = pytest.mark.gpu

TIMING = EvaluationOptions(TimingConfig(warmup=1, repetitions=5), kernel_timeout_s=20.0)
# The workload's performance cases take minutes of float64 reference on the CPU: one long causal case instead.
LONG = Case("long-2x8192-d128-causal", "performance", {"BH": 2, "S": 8192, "D": 128, "CAUSAL": 1})
# The defaults first: if they fail, the points after them say which schedule is at fault.
POINTS = [{}, {"OVERLAP": 0, "PINGPONG": 0}, {"OVERLAP": 0}, {"PINGPONG": 0}, {"BN": 64}, {"STAGES": 3},
          {"BN": 64, "STAGES": 3, "PINGPONG": 0}]


@pytest.fixture(scope="module")
def workload():
    w = load_workload(ROOT / "examples" / "attention_bf16")
    return replace(w, cases=tuple(c for c in w.cases if not c.timed) + (LONG,))


@pytest.fixture(scope="module")
def evaluator(workload):
    with Evaluator(workload, TIMING) as ev:
        if (ev.facts.cc_major, ev.facts.cc_minor) != (9, 0):
            pytest.skip("needs compute capability 9.0 (Hopper, sm_90a): wgmma, TMA, setmaxnreg")
        yield ev


@pytest.mark.parametrize("knobs", POINTS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "defaults")
def test_fa3_passes_every_case_and_the_long_causal_one(workload, evaluator, knobs):
    """Every correctness case, the stress case and ragged S included, and 2x8192-d128-causal pass; the long case is timed."""
    result = evaluator.evaluate(Candidate.from_spec(workload.kernels["fa3"], knobs))
    assert result.ok, (result.status, result.detail)
    assert {c.case for c in result.cases} >= {c.name for c in workload.cases}
    assert "stress-large-2x97-d64-causal" in {c.case for c in result.cases}
    long = result.case(LONG.name)
    assert long.timing is not None and long.timing.median_ms > 0
    print(knobs or "defaults", LONG.name, round(long.timing.median_ms, 4), "ms")


def test_fa3_passes_on_fresh_inputs(workload, evaluator):
    """Another seed's inputs, every case validated again (what a new best goes through)."""
    result = evaluator.evaluate(Candidate.from_spec(workload.kernels["fa3"]), seed=FRESH_SEED, time_cases=False)
    assert result.ok, (result.status, result.detail)


@pytest.mark.skipif(not torch_available(), reason="needs PyTorch")
@pytest.mark.parametrize("kind", ["torch_eager", "torch_cudnn"])
def test_sdpa_flash_and_cudnn_baselines_pass_the_same_checks(evaluator, kind):
    """SDPA pinned to flash (eager) and to cuDNN on the worker's buffers: every case passes and the long one is
    timed, or, for cuDNN only, every case it cannot serve here is not applicable, never failed."""
    assert kind in evaluator.baseline_kinds()
    result = evaluator.baseline(kind=kind)
    assert result is not None and result.ok, (result.status if result else None, result.detail if result else "")
    skipped = [c for c in result.cases if c.status == Status.NOT_APPLICABLE]
    if kind == "torch_eager" or not skipped:
        assert not skipped and result.case(LONG.name).timing.median_ms > 0
        print(kind, LONG.name, round(result.case(LONG.name).timing.median_ms, 4), "ms")
    else:
        print(kind, "not applicable on", [c.case for c in skipped], skipped[0].detail)
