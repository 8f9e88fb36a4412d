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

from warpsmith.agent.evaluate.early_reject import replay, screen
from warpsmith.agent.evaluate.results import Status
from warpsmith.agent.spec.timing_policy import MARGIN, SCREEN_LAUNCHES
from warpsmith.agent.spec.workload import load_workload

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
    """4% slower (inside the margin) is timed in full; so is one faster than the best; 8% slower is cut."""
    assert not screen({"a": steady(1.04)}, best_ms=1.0).reject
    assert not screen({"a": steady(0.9)}, best_ms=1.0).reject
    assert screen({"a": steady(1.08)}, best_ms=1.0).reject


def test_a_noisy_candidate_is_kept():
    """Launches scattered from as fast as the best to 60% slower: one launch of the first chunk at the best's
    speed keeps it (its median may be near the best's); none does not (it is not, but for a 0.05% chance),
    even when the launch just after the chunk is that fast."""
    assert SCREEN_LAUNCHES == 11  # the chunk these launches are laid out for
    spread = [1.3, 1.5, 1.4, 1.3, 1.6, 1.35, 1.3, 1.45, 1.3, 1.5, 1.4]
    assert not screen({"a": [1.01] + spread[1:] + steady(1.3, 80)}, best_ms=1.0).reject
    assert not screen({"a": spread[:10] + [1.01] + steady(1.3, 80)}, best_ms=1.0).reject
    assert screen({"a": spread + [1.01] + steady(1.3, 80)}, best_ms=1.0).reject


@pytest.mark.parametrize("n, k", [(5, 1), (10, 1), (13, 1), (14, 2), (20, 3), (30, 7), (100, 35)])
def test_the_rank_bounds_the_median_at_the_confidence(n, k):
    """lower_rank(n): the largest k whose chance of lying above the median, P(Binomial(n, 1/2) < k), is at most
    CONFIDENCE; k + 1 would exceed it. Under 10 launches no rank reaches it and the fastest is taken."""
    from math import comb

    from warpsmith.agent.spec.timing_policy import CONFIDENCE, lower_rank
    above = lambda rank: sum(comb(n, j) for j in range(rank)) / 2 ** n
    assert lower_rank(n) == k
    assert (above(k) <= CONFIDENCE or n < 10) and above(k + 1) > CONFIDENCE


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


def test_a_variant_for_one_case_is_kept_though_slower_overall():
    """Split-K's shape: 3x slower on the square case, twice as fast as the winner on the long-K one. The
    geomean alone cuts it; against the case winners it is timed in full, and the note names the case."""
    chunks = {"square": steady(3.0), "long-k": steady(0.5)}
    assert screen(chunks, best_ms=1.0).reject
    v = screen(chunks, best_ms=1.0, case_best_ms={"square": 1.0, "long-k": 1.0})
    assert not v.reject and "'long-k'" in v.note


def test_slower_than_every_case_winner_is_cut():
    """Slower than the best and than each case's winner by more than the margin: cut, and the note says both."""
    v = screen({"square": steady(1.3), "long-k": steady(1.3)}, best_ms=1.0, case_best_ms={"square": 1.0, "long-k": 1.0})
    assert v.reject and "every case's winner" in v.note


def test_a_case_without_a_winner_keeps_the_candidate():
    """A performance case nobody has won yet (none passed on it): any candidate may become its winner."""
    assert not screen({"square": steady(3.0), "long-k": steady(3.0)}, best_ms=1.0, case_best_ms={"square": 1.0}).reject


def test_a_number_that_is_not_one_never_cuts():
    """A NaN bound or best keeps the candidate (nothing is cut on it), and a NaN or infinite winner counts as
    no winner for its case."""
    nan, inf = float("nan"), float("inf")
    assert not screen({"a": [nan] * 10}, 1.0).reject
    assert not screen({"a": [1.5] * 10 + [nan] + [1.0] * 9}, 1.0).reject  # sorted() puts a NaN anywhere
    assert not screen({"a": [5.0] * 10}, nan).reject
    assert not screen({"a": [5.0] * 10, "b": [5.0] * 10}, 1.0, case_best_ms={"a": 1.0, "b": nan}).reject
    assert not screen({"a": [5.0] * 10, "b": [5.0] * 10}, 1.0, case_best_ms={"a": 1.0, "b": inf}).reject
    assert screen({"a": [5.0] * 10, "b": [5.0] * 10}, 1.0, case_best_ms={"a": 1.0, "b": 1.0}).reject


def test_the_case_margin_is_the_boundary():
    """A case just inside 1 + MARGIN of its winner keeps the candidate; just outside on every case cuts it."""
    best = {"a": 1.0, "b": 1.0}
    assert not screen({"a": [2.0] * 10, "b": [1.0 + MARGIN - 1e-6] * 10}, 1.0, case_best_ms=best).reject
    assert screen({"a": [2.0] * 10, "b": [1.0 + MARGIN + 1e-3] * 10}, 1.0, case_best_ms=best).reject


def test_the_screens_slack_against_the_later_full_median_is_measured():
    """screen_slack: a kept candidate's screen bound over its full timing's median, worst over the cases; a screen
    that ran 10% slow (another run: warm-up, clocks) shows as 1.10, above 1 + MARGIN."""
    from warpsmith.agent.evaluate.early_reject import screen_slack
    assert screen_slack([({"a": steady(1.0, 20)}, {"a": steady(1.0)})]) == (1, pytest.approx(1.0 / 1.004))
    n, worst = screen_slack([({"a": steady(1.0, 20), "b": steady(1.1, 20)}, {"a": steady(1.0), "b": steady(1.0)})])
    assert n == 2 and worst == pytest.approx(1.1 / 1.004) and worst > 1 + MARGIN
    assert screen_slack([({"a": steady(1.0, 20)}, {})]) == (0, 0.0)
    assert screen_slack([({"a": [None] + steady(1.0, 19)}, {"a": steady(1.0)})]) == (0, 0.0)  # a NaN, archived
    # a screen archived with 20 launches (older records) is judged on its first SCREEN_LAUNCHES, as any screen
    old = [1.02] * SCREEN_LAUNCHES + [0.9] * (20 - SCREEN_LAUNCHES)
    assert screen_slack([({"a": old}, {"a": [1.0] * 50})]) == (1, pytest.approx(1.02))


def test_replay_counts_cuts_and_winners():
    """The replay counts what the rule cuts and the winners among them; a winner slower than its best is caught."""
    r = replay([({"a": steady(2.0)}, 1.0, False, None), ({"a": steady(0.9)}, 1.0, True, None),
                ({"a": steady(5.0)}, None, False, None)])
    assert (r.timed, r.cut, r.winners, r.winners_cut) == (2, 1, 1, 0)
    assert r.saved_launches == 100 - SCREEN_LAUNCHES
    assert replay([({"a": steady(2.0)}, 1.0, True, None)]).winners_cut == 1


def test_replay_judges_a_case_winner_with_the_case_winners_it_was_timed_against():
    """A case's new winner, slower overall: the geomean-only rule would cut it (a winner cut); with the recorded
    case winners it is kept."""
    won_long_k = ({"square": steady(3.0), "long-k": steady(0.5)}, 1.0, True)
    assert replay([won_long_k + (None,)]).winners_cut == 1
    assert replay([won_long_k + ({"square": 1.0, "long-k": 1.0},)]).winners_cut == 0


def test_a_session_keeps_the_variant_its_long_k_case_wants(tmp_path):
    """Through the loop, early rejection on: BM=128 is 4x slower on square-1024 and twice as fast on long-k,
    so slower than the best by its geomean. It is timed in full, wins long-k, and the dispatch takes it there;
    its samples.json records the case winners it was timed against."""
    from test_dispatch import tiles_session
    factor = lambda d, case: (0.5 if d.get("BM") == 128 else 1.0) if case == "long-k" else \
        (4.0 if d.get("BM") == 128 else 1.0)
    s = tiles_session(tmp_path, factor, "keeps-long-k")
    d, history = s.state["dispatch"], s.state["history"]
    s.close()
    bm128 = [a for a in history if a.defines.get("BM") == 128]
    assert bm128 and all(a.status == Status.OK for a in bm128)
    assert {e.case: d.variants[e.variant].defines.get("BM") for e in d.entries}["long-k"] == 128 and d.pays
    timed = json.loads((s.dir / "attempts" / f"{bm128[0].iteration:03d}" / "samples.json").read_text())
    assert timed["case_best_ms"] and set(timed["case_best_ms"]) <= {"square-1024", "long-k"}


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
    # the double times a screen and its full timing alike: the bound is the median itself
    assert "screens kept and timed in full:" in proc.stdout and "worst screen bound / full median 1.000" in proc.stdout
    # search_speed.py --keep: the attempt records it copies out of a GPU machine replay the same
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from search_speed import keep_records
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    keep_records(s.dir, tmp_path / "kept")
    kept = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "early_reject_safety.py"), str(tmp_path / "kept")],
                          capture_output=True, text=True, timeout=120)
    assert kept.returncode == 0 and kept.stdout == proc.stdout.replace(str(tmp_path / "store"), str(tmp_path / "kept"))


def test_no_early_reject_times_everyone_in_full(tmp_path, workload):
    """--no-early-reject: the same session rejects nothing."""
    ev = EvaluatorDouble(workload, score=slow_corner)
    s = open_session(tmp_path, workload, 12, evaluator=ev, early_reject=False)
    assert s.end(s.run()) == "finished"
    assert ev.rejected == [] and not any(a.status == Status.REJECTED_EARLY for a in s.state["history"])
