"""On a real GPU: sgemm's few-columns kernel (sgemm/rowdot.cu), rows of A streamed in float4
steps against B staged transposed, the lanes' sums meeting in a shuffle exchange, passes
every correctness case of the workload plus tall-skinny shapes: N of one block's columns
and of fewer, N past a block (two column blocks), K not a multiple of 4 (scalar loads) or
of the chunk, M not a multiple of a block's rows."""

from __future__ import annotations

import pytest
from workload_factory import evaluate_on_correctness_cases

from warpsmith.agent.spec.workload_model import Case

pytestmark = pytest.mark.gpu

EXTRA = (
    Case("tall-4099x32x1024", "correctness", {"M": 4099, "N": 32, "K": 1024}),
    Case("tall-1000x7x333", "correctness", {"M": 1000, "N": 7, "K": 333}),
    Case("tall-517x40x260", "correctness", {"M": 517, "N": 40, "K": 260}),
)


@pytest.mark.parametrize("knobs", [{}, {"BN": 16, "R": 8}, {"BN": 64, "R": 2, "KC": 128}, {"R": 1, "WARPS": 4}])
def test_rowdot_kernel_passes_every_correctness_case(knobs):
    r, cases = evaluate_on_correctness_cases("sgemm", "rowdot", knobs, EXTRA)
    assert r.ok, (r.status, r.detail)
    assert {c.case for c in r.cases} >= cases
