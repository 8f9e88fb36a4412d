"""`warpsmith bench`'s measurement and table, with an EvaluatorDouble standing in
for the GPU; and the baseline kinds a workload declares."""

from __future__ import annotations

import pytest
from evaluator_double import EvaluatorDouble
from workload_factory import make_sgemm_workload

from agent.cli.bench import measure, render
from agent.evaluate.records import CandidateSpec
from agent.spec.candidate import Candidate
from agent.spec.workload import SpecError, load_workload


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def test_table_has_every_implementation_with_rate_floor_and_speedups(workload):
    ev = EvaluatorDouble(workload, score=lambda d: 0.25 if d.get("BK") == 16 else 1.0)
    best = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["tiled"], {"BK": 16}), "tune")
    bench = measure(workload, ev, best, "s1", 12, 30.0)
    assert [e.role for e in bench.entries] == ["start", "best", "baseline", "baseline"]
    rows = {r["implementation"]: r for r in bench.rows}
    b = rows[f"best: {best.name}"]
    assert b["median_ms"] == 0.25 and b["vs cublas_sgemm"] == pytest.approx(2.0) and b["vs torch_eager"] == pytest.approx(2.4)
    flops = 2 * 256 ** 3
    assert b["tflops"] == pytest.approx(flops / 0.25e-3 / 1e12)
    # 256^3 on 50 TFLOP/s (the double's ceilings) is a compute floor of 0.671 us.
    assert b["bound"] == "compute" and b["pct_of_floor"] == pytest.approx(flops / 50e12 * 1e3 / 0.25)
    text = render(bench)
    assert "| square-256 | best: " in text and "| 2.00x | 2.40x |" in text
    assert "vs cublas_sgemm | vs torch_eager" in text and "tuner 12 iterations in 30 s" in text


def test_torch_baseline_file_adds_eager_and_compile(tmp_path):
    """The sgemm example names torch_baseline.py beside cuBLAS."""
    d = make_sgemm_workload(tmp_path / "w")
    toml = d / "workload.toml"
    b = load_workload(d).baseline
    assert b.kinds() == ["cublas_sgemm", "torch_eager", "torch_compile"] and b.primary == "cublas_sgemm"
    toml.write_text(toml.read_text().replace('torch = "torch_baseline.py"', 'torch = "missing.py"'))
    with pytest.raises(SpecError, match="baseline.torch: missing.py not found"):
        load_workload(d)


def test_torch_kind_needs_its_file(tmp_path):
    d = make_sgemm_workload(tmp_path / "w")
    toml = d / "workload.toml"
    toml.write_text(toml.read_text().replace('kind = "cublas_sgemm"', 'kind = "torch"')
                    .replace('torch = "torch_baseline.py"\n', ''))
    with pytest.raises(SpecError, match='baseline.torch: kind = "torch" needs'):
        load_workload(d)


def test_a_dispatch_that_paid_is_timed_here_case_by_case_from_its_variants(tmp_path):
    """Each case's median comes from the variant the dispatch gives it, evaluated by the
    bench's own evaluator; a dispatch that did not pay adds no row."""
    from workload_factory import SMALL_CASES

    from agent.evaluate.dispatch import Dispatch, DispatchEntry
    two = SMALL_CASES + '[[cases]]\nname = "square-128"\nrole = "performance"\nsizes = { M = 128, N = 128, K = 128 }\n'
    workload = load_workload(make_sgemm_workload(tmp_path / "w", cases=two))
    ev = EvaluatorDouble(workload, score=lambda d: {16: 0.5, 32: 0.8}.get(d.get("BK"), 1.0))
    spec = {bk: CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["tiled"], {"BK": bk}), "tune")
            for bk in (16, 32)}
    timed = [c for c in workload.cases if c.timed]
    assert len(timed) == 2
    entries = [DispatchEntry(case=c.name, sizes=dict(c.sizes), variant=i % 2, median_ms=9.9) for i, c in enumerate(timed)]
    paid = Dispatch(variants=[spec[16], spec[32]], entries=entries, score_ms=0.4, single_score_ms=0.5)
    bench = measure(workload, ev, spec[16], dispatch=paid)
    row = next(e for e in bench.entries if e.role == "dispatch")
    expected = {c.name: (0.5 if i % 2 == 0 else 0.8) for i, c in enumerate(timed)}
    assert row.status == "ok" and row.medians == pytest.approx(expected)  # re-timed here, not the stored 9.9
    assert "dispatch: " in render(bench)
    unpaid = paid.model_copy(update={"score_ms": 0.5})
    assert all(e.role != "dispatch" for e in measure(workload, ev, spec[16], dispatch=unpaid).entries)
