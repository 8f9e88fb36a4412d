"""On a real GPU: the split-row kernels (softmax, layernorm and rmsnorm_bf16 split.cu),
which share a row's reduction between the blocks holding its slices, pass every
correctness case of their workloads plus the shapes their scheme has special paths for:
rows of many slices whose alignment changes from row to row (heads and tails of 1-7
elements, a last slice with no body), more tasks than the persistent grid (tickets
taken in turn, rows spread over blocks), a row of a single slice, and head/tail-only rows."""

from __future__ import annotations

from dataclasses import replace

import pytest
from workload_factory import ROOT

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.applicability import serves
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import Case
from warpsmith.agent.worker.protocol import TimingConfig
from warpsmith.agent.worker.status import Status

pytestmark = pytest.mark.gpu

EXTRA = (
    Case("9x100003", "correctness", {"rows": 9, "cols": 100003}),   # 13-49 slices a row, heads vary
    Case("300x16390", "correctness", {"rows": 300, "cols": 16390}),  # more tasks than blocks
    Case("2x262144", "correctness", {"rows": 2, "cols": 262144}),    # few rows, many slices each
    Case("500x7", "correctness", {"rows": 500, "cols": 7}),          # head and tail only
)


def correctness_cases(name: str):
    """The workload's correctness cases, the extra shapes, and one performance case (a
    candidate is judged only where it serves one)."""
    w = load_workload(ROOT / "examples" / name)
    # Rows of 7 are ill-conditioned for layer norm in fp32 (see test_gpu_bulk_rows.py);
    # the head/tail-only path is the same code in all three kernels.
    extra = tuple(c for c in EXTRA if not (name == "layernorm" and c.name == "500x7"))
    timed = [c for c in w.cases if c.timed]
    return replace(w, cases=tuple(c for c in w.cases if not c.timed) + extra + (timed[0],))


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rmsnorm_bf16"])
@pytest.mark.parametrize("knobs", [{}, {"SLICE": 16384, "NBUF": 2, "BLOCK": 256}, {"SLICE": 65536, "NBUF": 3, "BPS": 2}])
def test_split_kernel_passes_every_correctness_case(name, knobs):
    w = correctness_cases(name)
    candidate = Candidate.from_spec(w.kernels["split"], knobs)
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=1, repetitions=3), kernel_timeout_s=10.0)) as ev:
        r = ev.evaluate(candidate)
    assert r.ok, (r.status, r.detail)
    # Every case its launch rule admits ran and passed; the rest (rows longer than half
    # the grid's buffers, e.g. the accumulation probe at small NBUF * SLICE) are n/a.
    by_case = {c.case: c for c in r.cases}
    for case in w.cases:
        expected = Status.OK if serves(w, candidate, case) else Status.NOT_APPLICABLE
        assert by_case[case.name].status == expected, (case.name, by_case[case.name].detail)
