"""On a real GPU: the fp32 GEMMs for very few rows on the CUDA cores (colstream.cu of sgemm
and gemm_bias_relu), B streamed into registers, K split over blocks whose partial
tiles an ordered second step adds, pass every correctness case of their workload plus
decode shapes: M of one block's rows and of fewer, M past a block (two row blocks), N not
a multiple of a block's columns nor of 4 (B loaded a float at a time), K
slices that end mid-chunk or hold no rows at all."""

from __future__ import annotations

import pytest
from workload_factory import evaluate_on_correctness_cases

from warpsmith.agent.spec.workload_model import Case

pytestmark = pytest.mark.gpu

DECODE = (
    Case("decode-16x4096x4096", "correctness", {"M": 16, "N": 4096, "K": 4096}),
    Case("decode-5x1032x2056", "correctness", {"M": 5, "N": 1032, "K": 2056}),
    Case("decode-37x264x40", "correctness", {"M": 37, "N": 264, "K": 40}),  # K shorter than the slices
)
RAGGED = (Case("decode-9x1001x777", "correctness", {"M": 9, "N": 1001, "K": 777}),)  # N not a multiple of 4


@pytest.mark.parametrize("workload,knobs", [
    ("sgemm", {}), ("sgemm", {"MT": 4, "U": 8, "SPLITK": 16}), ("gemm_bias_relu", {}),
    ("gemm_bias_relu", {"MT": 8, "SPLITK": 1}),
])
def test_colstream_kernel_passes_every_correctness_case(workload, knobs):
    extra = DECODE + RAGGED
    r, cases = evaluate_on_correctness_cases(workload, "colstream", knobs, extra)
    assert r.ok, (r.status, r.detail)
    assert {c.case for c in r.cases} >= cases
