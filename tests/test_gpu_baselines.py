"""On a real GPU: the PyTorch baselines (eager and torch.compile) validated and timed
in the worker on its own stream, and cuBLAS + a separate bias/ReLU epilogue."""

from __future__ import annotations

import pytest
from workload_factory import ROOT, make_sgemm_workload

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig
from warpsmith.agent.worker.torch_baseline import torch_available

pytestmark = pytest.mark.gpu
needs_torch = pytest.mark.skipif(not torch_available(), reason="needs PyTorch")


@pytest.fixture(scope="module")
def sgemm(tmp_path_factory):
    return load_workload(make_sgemm_workload(tmp_path_factory.mktemp("sgemm")))  # names torch_baseline.py


@needs_torch
@pytest.mark.parametrize("kind", ["torch_eager", "torch_compile"])
def test_torch_baselines_pass_the_same_checks_and_are_timed(sgemm, kind):
    with Evaluator(sgemm, EvaluationOptions(TimingConfig(warmup=3, repetitions=20))) as ev:
        assert kind in ev.baseline_kinds()
        r = ev.baseline(kind=kind)
    assert r.ok, r.detail
    timed = [c for c in r.cases if c.timing]
    assert timed and all(c.timing.median_ms > 0 for c in timed)
    print(kind, {c.case: round(c.timing.median_ms, 4) for c in timed})


@pytest.mark.skipif(not (ROOT / "examples" / "gemm_bias_relu").is_dir(), reason="needs examples/gemm_bias_relu")
def test_cublas_plus_epilogue_baseline_matches_numpy(tmp_path):
    w = load_workload(ROOT / "examples" / "gemm_bias_relu")
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=3, repetitions=20))) as ev:
        r = ev.baseline(kind="cublas_sgemm_bias_relu")
    assert r.ok, r.detail
    print({c.case: round(c.timing.median_ms, 4) for c in r.cases if c.timing})
