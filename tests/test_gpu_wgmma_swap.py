"""On a real GPU: bf16_gemm's decode kernel with the operands swapped (wgmma_swap.cu: C^T = B^T
A^T on wgmma, 64 columns of C as its M) passes every correctness case of the workload plus
decode shapes: M of one tile's rows and fewer, M past a tile (two row tiles), N not a multiple
of 64 (a clipped B box), K slices that hold no K tile at all, and split-K's ordered sum."""

from __future__ import annotations

import pytest
from workload_factory import evaluate_on_correctness_cases

from warpsmith.agent.spec.workload_model import Case

pytestmark = pytest.mark.gpu

DECODE = (
    Case("decode-16x4096x4096", "correctness", {"M": 16, "N": 4096, "K": 4096}),
    Case("decode-5x1032x2056", "correctness", {"M": 5, "N": 1032, "K": 2056}),
    Case("decode-37x264x40", "correctness", {"M": 37, "N": 264, "K": 40}),  # K shorter than one tile: empty slices
    Case("decode-64x200x128", "correctness", {"M": 64, "N": 200, "K": 128}),
)


@pytest.mark.parametrize("knobs", [{}, {"MN": 32, "NC": 2}, {"MN": 64, "SPLITK": 4, "STAGES": 6},
                                   {"SPLITK": 2, "STAGES": 4}, {"MN": 16, "NC": 2, "SPLITK": 4}])
def test_wgmma_swap_passes_every_correctness_case(knobs):
    r, cases = evaluate_on_correctness_cases("bf16_gemm", "wgmma_swap", knobs, DECODE)
    assert r.ok, (r.status, r.detail)
    assert {c.case for c in r.cases} >= cases
