"""On a real GPU: the few-rows bf16 GEMM (bf16_gemm/skinny.cu), K split over a cluster
whose partial tiles meet in distributed shared memory, passes every correctness case of
the workload plus decode shapes: M of one 16-row tile and of four, ragged M, N not a
multiple of the block's columns, K not a multiple of the split (empty K ranges too)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from workload_factory import ROOT

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import Case
from warpsmith.agent.worker.protocol import TimingConfig

pytestmark = pytest.mark.gpu

EXTRA = (
    Case("decode-16x4096x4096", "correctness", {"M": 16, "N": 4096, "K": 4096}),
    Case("decode-64x1032x2056", "correctness", {"M": 64, "N": 1032, "K": 2056}),
    Case("ragged-37x136x40", "correctness", {"M": 37, "N": 136, "K": 40}),  # K shorter than the split's ranges
)


@pytest.mark.parametrize("knobs", [{}, {"MT": 4, "BN": 256, "WARPS": 8, "SPLITK": 8},
                                   {"SPLITK": 1, "BN": 64, "BK": 32, "STAGES": 3}, {"MT": 2, "SPLITK": 2, "BK": 128}])
def test_skinny_kernel_passes_every_correctness_case(knobs):
    w = load_workload(ROOT / "examples" / "bf16_gemm")
    w = replace(w, cases=tuple(c for c in w.cases if not c.timed) + EXTRA)
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=1, repetitions=3), kernel_timeout_s=10.0)) as ev:
        r = ev.evaluate(Candidate.from_spec(w.kernels["skinny"], knobs))
    assert r.ok, (r.status, r.detail)
    assert {c.case for c in r.cases} >= {c.name for c in w.cases}
