"""A variant per shape (agent/evaluate/dispatch.py): per-case winners, re-timed beside the
best single variant, fresh inputs for every variant, the rule for unseen shapes. A
double stands in for the GPU evaluator, with per-case times per variant."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.dispatch import build_dispatch, update_winners
from warpsmith.agent.evaluate.records import CandidateSpec
from warpsmith.agent.evaluate.results import CaseResult, EvaluationResult, Status
from warpsmith.agent.evaluate.shape_rule import rank_variants
from warpsmith.agent.evaluate.stats import TimingStats
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload

CASES = """
[[cases]]
name = "odd-97x83x61"
role = "correctness"
sizes = { M = 97, N = 83, K = 61 }

[[cases]]
name = "square-1024"
role = "performance"
sizes = { M = 1024, N = 1024, K = 1024 }

[[cases]]
name = "long-k"
role = "performance"
sizes = { M = 256, N = 256, K = 131072 }
"""


class PerCaseEvaluatorDouble:
    """Stands in for the GPU evaluator: `times[variant name][case]` ms; `fresh_fail` names fail seed 2."""

    def __init__(self, workload, times, fresh_fail=(), fail=()):
        self.workload, self.times, self.fresh_fail, self.fail = workload, times, set(fresh_fail), set(fail)
        self.calls: list[tuple[str, int]] = []

    def evaluate(self, candidate, seed=1, revalidate=True, time_cases=True, validate=True, on_event=None):
        self.calls.append((candidate.name, seed))
        bad = candidate.name in self.fail or (seed != 1 and candidate.name in self.fresh_fail)
        status = Status.WRONG_ANSWER if bad else Status.OK
        cases = [CaseResult(c.name, c.role, status,
                            timing=TimingStats.of([self.times[candidate.name][c.name]] * 5)
                            if c.timed and time_cases and not bad else None) for c in self.workload.cases]
        return EvaluationResult(candidate.name, status, None, cases, seed=seed)


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w", CASES, kernels=("naive", "tiled", "splitk")))


def spec(workload, kernel, name, **defines):
    c = Candidate.from_spec(workload.kernels[kernel], defines)
    return CandidateSpec.from_candidate(c, "tune").model_copy(update={"name": name})


def test_each_case_gets_its_fastest_variant_and_the_dispatch_is_judged_against_the_best(workload):
    """Tiles win square-1024, split-K wins long-K: the dispatch pays against the best single variant."""
    tiled, split = spec(workload, "tiled", "tiled"), spec(workload, "splitk", "split", SPLITK=32)
    winners = update_winners({}, 1, tiled, {"square-1024": 0.10, "long-k": 2.0})
    winners = update_winners(winners, 2, split, {"square-1024": 0.20, "long-k": 0.25})
    ev = PerCaseEvaluatorDouble(workload, {"tiled": {"square-1024": 0.1, "long-k": 2.0},
                                           "split": {"square-1024": 0.2, "long-k": 0.25}})
    d = build_dispatch(ev, workload, winners, tiled)
    assert [d.variants[e.variant].name for e in d.entries] == ["tiled", "split"]
    assert d.score_ms == pytest.approx((0.1 * 0.25) ** 0.5) and d.single_score_ms == pytest.approx((0.1 * 2.0) ** 0.5)
    assert d.pays and "pays" in d.lines()[-1]
    assert ev.calls.count(("tiled", 1)) == 2 and ev.calls.count(("split", 1)) == 2 and ("split", 2) in ev.calls
    assert d.variant_for({"M": 300, "N": 200, "K": 100000}).name == "split"
    assert d.variant_for({"M": 2048, "N": 2048, "K": 2048}).name == "tiled"


def test_a_variant_failing_on_fresh_inputs_is_dropped(workload):
    """A per-case winner that fails on FRESH_SEED gives its case back to the best single variant."""
    tiled, split = spec(workload, "tiled", "tiled"), spec(workload, "splitk", "split")
    winners = update_winners(update_winners({}, 1, tiled, {"square-1024": 0.1, "long-k": 2.0}), 2, split,
                             {"long-k": 0.25})
    ev = PerCaseEvaluatorDouble(workload, {n: {"square-1024": 0.1, "long-k": 0.25 if n == "split" else 2.0}
                                           for n in ("tiled", "split")}, fresh_fail={"split"})
    d = build_dispatch(ev, workload, winners, tiled)
    assert all(e.variant == 0 for e in d.entries) and not d.pays
    assert d.dropped == ["split: wrong_answer on fresh inputs (seed 2)"]


def test_no_dispatch_when_the_best_wins_every_case(workload):
    """One variant for every case: nothing to dispatch, nothing re-evaluated."""
    tiled = spec(workload, "tiled", "tiled")
    ev = PerCaseEvaluatorDouble(workload, {})
    assert build_dispatch(ev, workload, update_winners({}, 1, tiled, {"square-1024": 0.1, "long-k": 2.0}),
                          tiled) is None
    assert ev.calls == []


def tiles_session(tmp_path, factor, name: str = "dispatch-session"):
    """A 12-attempt tune session of tiled on the small sgemm workload (early rejection on), each case's time
    `factor(knob values, case)` (the EvaluatorDouble stands in for the GPU), run to its end."""
    from evaluator_double import EvaluatorDouble

    from warpsmith.agent.loop.options import SearchOptions
    from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
    from warpsmith.agent.proposers.choice import ProposerChoice
    from warpsmith.agent.proposers.tune import TuneProposer
    from warpsmith.agent.tracking.session_tracker import NullTracker
    w = load_workload(make_sgemm_workload(tmp_path / "w", CASES))
    ev = EvaluatorDouble(w, score=lambda d: 1.0, case_factor=factor)
    info = SessionInfo(name, str(w.directory), SearchOptions(ProposerChoice("tune"), 12))
    s = Session(info, session_dir(tmp_path / "store", info.id), w, ev, TuneProposer(0, kernel="tiled"), NullTracker())
    assert info.search.early_reject
    assert s.end(s.run()) == "finished"
    return s


def test_a_session_whose_cases_want_different_tiles_ends_with_a_dispatch(tmp_path):
    """Through the loop: BM=128 wins long-K, smaller tiles win square-1024; the session's end
    re-times both, keeps the dispatch, and the report and dispatch.json carry it."""
    factor = lambda d, case: (0.2 if d.get("BM") == 128 else 1.0) if case == "long-k" else \
        (1.0 if d.get("BM") == 64 else 3.0)
    s = tiles_session(tmp_path, factor)
    d = s.state["dispatch"]
    s.close()
    chosen = {e.case: d.variants[e.variant].defines["BM"] for e in d.entries}
    assert chosen == {"square-1024": 64, "long-k": 128} and d.pays
    report = (s.dir / "best" / "report.md").read_text()
    assert "## Variant per shape" in report and "pays" in report
    assert (s.dir / "best" / "dispatch.json").is_file()


def _exported(directory, workload):
    """A paying dispatch of the tiled kernel and split-K (SPLITK = 32), exported into `directory`
    as kernel.py and its variants; returned with the files written."""
    from warpsmith.agent.evaluate.records import Best
    from warpsmith.agent.runtime.device_facts import DeviceFacts
    from warpsmith.agent.tracking.best_kernel import write_best
    tiled, split = spec(workload, "tiled", "tiled"), spec(workload, "splitk", "split", SPLITK=32)
    winners = update_winners(update_winners({}, 1, tiled, {"square-1024": 0.1, "long-k": 2.0}), 2, split,
                             {"long-k": 0.25})
    ev = PerCaseEvaluatorDouble(workload, {"tiled": {"square-1024": 0.1, "long-k": 2.0},
                                           "split": {"square-1024": 0.2, "long-k": 0.25}})
    d = build_dispatch(ev, workload, winners, tiled)
    best = Best(spec=tiled, score_ms=d.single_score_ms, cases=[], iteration=1)
    return d, write_best(directory, workload, best, None, {}, None, DeviceFacts(), module=True, dispatch=d)


def _kernel_py(directory, code: str, *args: str):
    """`code` run with the exported kernel.py importable and the standard library alone."""
    probe = "import sys, json; sys.path.insert(0, sys.argv[1]); import kernel; " + code
    return subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(directory), *args],
                          capture_output=True, text=True)


def test_export_of_a_dispatch_chooses_the_variant_by_the_sizes(tmp_path, workload):
    """With a dispatch that pays, kernel.py picks variant_N.py by the stated rule, the same choice
    as Dispatch.variant_for; every file imports with the standard library alone."""
    d, files = _exported(tmp_path, workload)
    assert {"kernel.py", "variant_0.py", "variant_1.py", "dispatch.json"} <= set(files)
    out = _kernel_py(tmp_path, "print(kernel.variant_for(M=300, N=200, K=100000), kernel.variant_for(M=2048, N=2048, "
                               "K=2048), kernel.variant(1).PROGRAM, kernel.variant(0).PROGRAM)")
    assert out.stdout.split() == ["1", "0", "True", "False"], out.stderr
    assert d.variant_for({"M": 300, "N": 200, "K": 100000}).name == "split"


def test_export_rule_on_shapes_the_session_never_saw(tmp_path, workload):
    """kernel.py, on shapes no case had, takes the variant measured fastest around the shape whose
    launch is valid there: split-K for long K, the tiled kernel where split-K's workspace would pass
    the limit; Dispatch.variant_for with the workload makes the same choices."""
    d, _ = _exported(tmp_path, workload)
    assert d.times == [[0.1, 2.0], [0.2, 0.25]]
    unseen = [dict(M=200, N=300, K=200000), dict(M=40000, N=40000, K=200000), dict(M=3000, N=2500, K=1500)]
    out = _kernel_py(tmp_path, "print(*[kernel.variant_for(**s) for s in json.loads(sys.argv[2])])", json.dumps(unseen))
    assert out.stdout.split() == ["1", "0", "0"], out.stderr
    assert [d.variant_for(s, workload).name for s in unseen] == ["split", "tiled", "tiled"]
    assert d.variant_for(unseen[1]).name == "split"  # the rule alone, blind to the workspace limit


def test_the_shape_rule_keeps_to_the_regime_of_the_shape():
    """A shape takes the variant measured on cases of its own regime (few rows, a causal flag),
    not the winner of a case nearer in octaves on the other side of it; with no case of its
    regime it still gets the nearest."""
    cases = [dict(M=512, N=512, K=512), dict(M=16, N=8192, K=8192)]
    times = [[0.10, 0.90], [0.30, 0.50]]  # variant 0 wins the square case, variant 1 the decode one
    assert rank_variants(dict(M=48, N=512, K=512), cases, times)[0] == 1  # few rows: the decode case's
    assert rank_variants(dict(M=600, N=512, K=512), cases, times)[0] == 0
    attention = [dict(S=4096, CAUSAL=0), dict(S=4096, CAUSAL=1)]
    assert rank_variants(dict(S=8192, CAUSAL=1), attention, [[0.1, 0.4], [0.2, 0.3]])[0] == 1
    assert rank_variants(dict(S=8192, CAUSAL=0), attention, [[0.1, 0.4], [0.2, 0.3]])[0] == 0
    assert rank_variants(dict(M=8, N=8, K=8), cases, times)[0] == 1  # every size small: decode is nearer
