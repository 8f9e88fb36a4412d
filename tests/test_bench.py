"""`warpsmith bench`'s measurement and table, with an EvaluatorDouble standing in
for the GPU; and the baseline kinds a workload declares."""

from __future__ import annotations

import pytest
from evaluator_double import EvaluatorDouble
from workload_factory import make_sgemm_workload

from warpsmith.agent.cli.bench import measure, render
from warpsmith.agent.evaluate.records import CandidateSpec
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError


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

    from warpsmith.agent.evaluate.dispatch import Dispatch, DispatchEntry
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


def test_suite_line_takes_the_fastest_library_of_each_case_and_the_dispatch_first(tmp_path):
    """The suite's measure: per case the fastest baseline there (not the workload's
    primary), ours the dispatch where it paid; the suite is the geomean over workloads."""
    import json
    from dataclasses import asdict

    from warpsmith.agent.cli.bench import Entry, WorkloadBench, against_libraries, render_suite

    def bench(name, entries):
        return WorkloadBench(name, "GPU", "s", 40, 30.0, "measured", entries=entries)

    a = bench("a", [Entry("start: naive", "start", "ok", {"c1": 4.0, "c2": 4.0}, 4.0),
                    Entry("best: k", "best", "ok", {"c1": 1.0, "c2": 2.0}, 1.41),
                    Entry("dispatch: 2 variants", "dispatch", "ok", {"c1": 1.0, "c2": 1.0}, 1.0),
                    Entry("cublas_sgemm", "baseline", "ok", {"c1": 2.0, "c2": 0.5}, 1.0),
                    Entry("torch_compile", "baseline", "ok", {"c1": 1.5, "c2": 0.8}, 1.1)])
    b = bench("b", [Entry("start: naive", "start", "ok", {"c": 3.0}, 3.0),
                    Entry("best: k", "best", "ok", {"c": 2.0}, 2.0),
                    Entry("torch_eager", "baseline", "ok", {"c": 4.0}, 4.0)])
    none = bench("c", [Entry("start: naive", "start", "ok", {"c": 3.0}, 3.0)])
    ca = against_libraries(a)
    assert ca is not None and ca.ours == "dispatch"
    assert ca.per_case == {"c1": (1.5, "torch_compile"), "c2": (0.5, "cublas_sgemm")}
    assert ca.ratio == pytest.approx(0.75 ** 0.5)
    assert against_libraries(none) is None
    text = render_suite([a, b, none])
    assert "| a | dispatch | c1 1.500x (torch_compile), c2 0.500x (cublas_sgemm) | 0.866x |" in text
    assert "| b | best | c 2.000x (torch_eager) | 2.000x |" in text
    assert text.endswith(f"suite geomean over 2 workloads: {(0.75 ** 0.5 * 2.0) ** 0.5:.3f}x")
    assert render_suite([none]) == ""
    # benchmarks/suite_table.py joins `bench --json` outputs of separate runs.
    back = [WorkloadBench.from_json(d) for d in json.loads(json.dumps([asdict(a), asdict(b)]))]
    assert render_suite(back) == render_suite([a, b])


def test_suite_table_script_renders_json_of_separate_runs(tmp_path, workload):
    import json
    import subprocess
    import sys
    from dataclasses import asdict
    from pathlib import Path

    ev = EvaluatorDouble(workload, score=lambda d: 0.25 if d.get("BK") == 16 else 1.0)
    best = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["tiled"], {"BK": 16}), "tune")
    bench = measure(workload, ev, best, "s1", 12, 30.0)
    path = tmp_path / "one.json"
    path.write_text(json.dumps([asdict(bench)], default=str))
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "suite_table.py"
    out = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, check=True).stdout
    assert out.startswith(render(bench)) and "suite geomean over 1 workload: " in out
    suite = subprocess.run([sys.executable, str(script), "--suite", str(path)], capture_output=True, text=True,
                           check=True).stdout
    assert suite.startswith("## Against the fastest library of each case")
