"""On a real GPU: the padded 3xTF32 programs (sgemm and gemm_bias_relu tf32x3_padded.cu),
which copy A and B into zero-padded workspaces and run the GEMM on the copies, pass every
correctness case of their workloads (all ragged: K and N of every residue mod 4) and a
larger ragged shape whose tiles are mostly interior."""

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

RAGGED = Case("ragged-1999x3001x999", "performance", {"M": 1999, "N": 3001, "K": 999})


@pytest.mark.parametrize("name", ["sgemm", "gemm_bias_relu"])
@pytest.mark.parametrize("knobs", [{}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 3}])
def test_padded_program_passes_every_correctness_case(name, knobs):
    w = load_workload(ROOT / "examples" / name)
    w = replace(w, cases=tuple(c for c in w.cases if not c.timed) + (RAGGED,))
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=1, repetitions=3), kernel_timeout_s=10.0)) as ev:
        r = ev.evaluate(Candidate.from_spec(w.kernels["tf32x3_padded"], knobs))
    assert r.ok, (r.status, r.detail)
    assert {c.case for c in r.cases} >= {c.name for c in w.cases}
