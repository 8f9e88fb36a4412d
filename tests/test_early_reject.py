"""Early rejection (agent/evaluate/early_reject.py): the rule on synthetic samples, the
loop recording a rejected candidate with its partial samples, and the replay over a
recorded session (benchmarks/early_reject_safety.py). The EvaluatorDouble stands in
for the GPU; the rule it applies is the real one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from evaluator_double import EvaluatorDouble, knob_score
from test_loop import open_session
from workload_factory import make_sgemm_workload

from agent.evaluate.early_reject import MARGIN, SCREEN_LAUNCHES, replay, screen
from agent.evaluate.results import Status
from agent.spec.workload import load_workload

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def steady(ms: float, n: int = 100) -> list[float]:
    return [ms * (1 + 0.002 * (i % 5)) for i in range(n)]


def test_a_clearly_slower_candidate_is_cut():
    """Every case 30% slower than the best: rejected, with the bound and the best in the note."""
    v = screen({"a": steady(1.3), "b": steady(2.6)}, best_ms=(1.0 * 2.0) ** 0.5)
    assert v.reject and "1.30x" in v.note and v.bound_ms == pytest.approx(1.3 * 2 ** 0.5)


def test_a_candidate_near_the_best_is_kept():
    """5% slower (inside the margin) is timed in full; so is one faster than the best."""
    assert not screen({"a": steady(1.05)}, best_ms=1.0).reject
    assert not screen({"a": steady(0.9)}, best_ms=1.0).reject


def test_a_noisy_candidate_is_kept():
    """A median 30% slower but launches as fast as the best among the first chunk: its minimum keeps it."""
    noisy = [1.3, 1.5, 1.01, 1.4, 1.3, 1.6, 1.35, 1.3, 1.45, 1.3] + steady(1.3, 90)
    assert not screen({"a": noisy}, best_ms=1.0).reject


def test_only_the_first_chunk_is_read():
    """Fast launches after the first chunk do not count: the rule sees what the GPU ran before it stopped."""
    late = steady(1.5, SCREEN_LAUNCHES) + [0.5] * 90
    assert screen({"a": late}, best_ms=1.0).reject


def test_the_geomean_of_minima_decides_not_one_case():
    """One case much slower, another faster: kept while the geomean of the minima can still beat the best."""
    assert not screen({"a": steady(1.5), "b": steady(0.7)}, best_ms=1.0).reject  # sqrt(1.05) ~ 1.025
    assert screen({"a": steady(1.5), "b": steady(0.9)}, best_ms=1.0).reject  # sqrt(1.35) ~ 1.16


def test_without_a_best_or_samples_nothing_is_cut():
    """No best yet, or a case without samples: keep timing."""
    assert not screen({"a": steady(9.0)}, best_ms=None).reject
    assert not screen({"a": []}, best_ms=1.0).reject


def test_the_margin_is_the_boundary():
    """Just under 1 + MARGIN is kept, just over is cut."""
    assert not screen({"a": [1.0 + MARGIN - 1e-6] * 10}, best_ms=1.0).reject
    assert screen({"a": [1.0 + MARGIN + 1e-3] * 10}, best_ms=1.0).reject


def test_replay_counts_cuts_and_winners():
    """The replay counts what the rule cuts and the winners among them; a winner slower than its best is caught."""
    r = replay([({"a": steady(2.0)}, 1.0, False), ({"a": steady(0.9)}, 1.0, True), ({"a": steady(5.0)}, None, False)])
    assert (r.timed, r.cut, r.winners, r.winners_cut) == (2, 1, 1, 0)
    assert r.saved_launches == 100 - SCREEN_LAUNCHES
    assert replay([({"a": steady(2.0)}, 1.0, True)]).winners_cut == 1


def slow_corner(defines: dict) -> float:
    """knob_score, with BM=32 made four times slower: a candidate the rule must cut."""
    return knob_score(defines) * (4.0 if defines.get("BM") == 32 else 1.0)


def test_loop_records_a_rejected_candidate_and_never_picks_it(tmp_path, workload):
    """In a tune session, slow candidates end rejected_early with their partial samples archived; none is ever the
    best, the next proposal still optimises, and the replay over the session cuts no winner."""
    ev = EvaluatorDouble(workload, score=slow_corner)
    s = open_session(tmp_path, workload, 12, evaluator=ev)
    assert s.end(s.run()) == "finished"
    history = s.state["history"]
    rejected = [a for a in history if a.status == Status.REJECTED_EARLY]
    assert rejected and ev.rejected == [a.name for a in rejected]
    for a in rejected:  # each one slower than the best it was timed against by more than the margin
        best_ms = json.loads((s.dir / "attempts" / f"{a.iteration:03d}" / "samples.json").read_text())["best_ms"]
        assert slow_corner(a.defines) > (1 + MARGIN) * best_ms
    assert not any(a.new_best for a in rejected) and s.state["best"].iteration not in {a.iteration for a in rejected}
    samples = json.loads((s.dir / "attempts" / f"{rejected[0].iteration:03d}" / "samples.json").read_text())
    assert samples["status"] == "rejected_early" and samples["best_ms"] and all(samples["cases"].values())
    assert f"{len(rejected)} rejected early" in (s.dir / "best" / "report.md").read_text()
    from mlflow.tracking import MlflowClient
    client = MlflowClient(s.tracker.uri)
    run = client.get_run(s.info.mlflow_run_id)
    children = client.search_runs([run.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{run.info.run_id}' and tags.`warpsmith.status` = 'rejected_early'")
    assert len(children) == len(rejected) and all(c.info.status == "FINISHED" for c in children)
    assert all(c.data.metrics["rejected_early"] == 1.0 for c in children)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "early_reject_safety.py"), str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"cuts {len(rejected)} " in proc.stdout and "winners cut 0" in proc.stdout


def test_no_early_reject_times_everyone_in_full(tmp_path, workload):
    """--no-early-reject: the same session rejects nothing."""
    ev = EvaluatorDouble(workload, score=slow_corner)
    s = open_session(tmp_path, workload, 12, evaluator=ev, early_reject=False)
    assert s.end(s.run()) == "finished"
    assert ev.rejected == [] and not any(a.status == Status.REJECTED_EARLY for a in s.state["history"])
