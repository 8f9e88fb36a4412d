"""On a real GPU: the bf16 GEMM for very few rows on the CUDA cores (bf16_gemm/colstream.cu),
B streamed into registers, K split over blocks whose partial tiles an ordered reduce adds
and rounds, passes every correctness case of the workload plus decode shapes: M of one
block's rows and of fewer, M past a block (two row blocks), N not a multiple of a block's
256 columns, K slices that end mid-chunk or hold no rows at all."""

from __future__ import annotations

import pytest
from workload_factory import evaluate_on_correctness_cases

from warpsmith.agent.spec.workload_model import Case

pytestmark = pytest.mark.gpu

EXTRA = (
    Case("decode-16x4096x4096", "correctness", {"M": 16, "N": 4096, "K": 4096}),
    Case("decode-5x1032x2056", "correctness", {"M": 5, "N": 1032, "K": 2056}),
    Case("decode-37x264x40", "correctness", {"M": 37, "N": 264, "K": 40}),  # K shorter than the slices
)


@pytest.mark.parametrize("knobs", [{}, {"MT": 8, "WARPS": 16, "U": 2}, {"MT": 4, "U": 8, "SPLITK": 16},
                                   {"SPLITK": 1, "WARPS": 4}])
def test_colstream_kernel_passes_every_correctness_case(knobs):
    r, cases = evaluate_on_correctness_cases("bf16_gemm", "colstream", knobs, EXTRA)
    assert r.ok, (r.status, r.detail)
    assert {c.case for c in r.cases} >= cases
