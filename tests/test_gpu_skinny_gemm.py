"""On a real GPU: the few-rows bf16 GEMM (bf16_gemm/skinny.cu), K split over a cluster
whose partial tiles meet in distributed shared memory, passes every correctness case of
the workload plus decode shapes: M of one 16-row tile and of four, ragged M, N not a
multiple of the block's columns, K not a multiple of the split (empty K ranges too)."""

from __future__ import annotations

import pytest
from workload_factory import evaluate_on_correctness_cases

from warpsmith.agent.spec.workload_model import Case

pytestmark = pytest.mark.gpu

EXTRA = (
    Case("decode-16x4096x4096", "correctness", {"M": 16, "N": 4096, "K": 4096}),
    Case("decode-64x1032x2056", "correctness", {"M": 64, "N": 1032, "K": 2056}),
    Case("ragged-37x136x40", "correctness", {"M": 37, "N": 136, "K": 40}),  # K shorter than the split's ranges
)


@pytest.mark.parametrize("knobs", [{}, {"MT": 4, "BN": 256, "WARPS": 8, "SPLITK": 8},
                                   {"SPLITK": 1, "BN": 64, "BK": 32, "STAGES": 3}, {"MT": 2, "SPLITK": 2, "BK": 128}])
def test_skinny_kernel_passes_every_correctness_case(knobs):
    r, cases = evaluate_on_correctness_cases("bf16_gemm", "skinny", knobs, EXTRA)
    assert r.ok, (r.status, r.detail)
    assert {c.case for c in r.cases} >= cases
