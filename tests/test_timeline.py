"""The session's timeline: every loop event with its time, kinds and timing facts only.
An EvaluatorDouble stands in for the GPU; the session, checkpoint and tracker are real."""

from __future__ import annotations

from evaluator_double import EvaluatorDouble
from workload_factory import make_sgemm_workload

from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.loop.timeline import FILE, read_timeline
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker


def test_a_session_writes_when_each_node_ran_and_nothing_of_the_kernels(tmp_path):
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    tracker = Tracker(tmp_path / "store")
    directory = session_dir(tmp_path / "store", "s1")
    directory.mkdir(parents=True)
    info = SessionInfo("s1", str(workload.directory), SearchOptions(ProposerChoice(kernel="tiled"), budget=3))
    info.mlflow_run_id = tracker.start(workload.name, "s1", {"proposer": "tune"})
    session = Session(info, directory, workload, EvaluatorDouble(workload), TuneProposer(0, kernel="tiled"), tracker)
    seen: list[object] = []
    assert session.run(seen.append) == "finished"
    session.end("finished")
    session.close()

    records = read_timeline(directory)
    assert len(records) == len(seen)  # every event reached the front end and the file
    assert [r["event"] for r in records] == [type(e).__name__ for e in seen]
    assert all(b["t"] >= a["t"] for a, b in zip(records, records[1:]))
    started = [(r["node"], r.get("iteration")) for r in records if r["event"] == "NodeStarted"]
    assert started[0] == ("plan", 0)
    assert {("evaluate", i) for i in (1, 2, 3)} <= set(started)
    assert sum(r["event"] == "NodeFinished" and r["node"] == "evaluate" for r in records) >= 1
    cases = [r for r in records if r["event"] == "CaseFinished"]
    assert cases and all("elapsed_ms" in r for r in cases)  # the worker's time per case (search_speed.py sums it)
    ran = [r for r in records if r["event"] == "EvaluatorRan"]  # each phase's span (search_speed.py's evaluator share)
    assert {r["phase"] for r in ran} == {"validate", "time"}
    assert all(r["began_s"] <= r["t"] and r["evaluator_ms"] >= 0 and "call_ms" not in r for r in ran)
    compiles = [r for r in records if r["event"] == "CompileFinished"]
    assert compiles and all(isinstance(r["cached"], bool) and "compile_ms" in r for r in compiles)
    text = (directory / FILE).read_text()
    source = workload.kernels["tiled"].source()
    assert "__global__" in source and "__global__" not in text and "tiled" not in text


def _search_speed():
    """benchmarks/search_speed.py as a module (benchmarks/ is no package: its own imports
    need it on sys.path while it loads)."""
    import importlib
    import sys
    from pathlib import Path
    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, benchmarks)
    try:
        return importlib.import_module("search_speed")
    finally:
        sys.path.remove(benchmarks)


def test_search_speeds_evaluator_share_counts_overlapping_phases_once_and_the_ray_hop(capsys):
    """benchmarks/search_speed.py's account of the GPU side: the union of the phases' spans
    over the window from the first to the last, the worker's cases per attempt, and what the
    Ray calls took over the evaluator's own time."""
    evaluator_share = _search_speed().evaluator_share
    records = [  # one Ray call per attempt, its wait on the validation's record; attempt 2 overlaps 1 (another GPU)
        {"event": "EvaluatorRan", "iteration": 1, "phase": "validate", "began_s": 100.0, "evaluator_ms": 200.0,
         "call_ms": 914.0},
        {"event": "EvaluatorRan", "iteration": 1, "phase": "time", "began_s": 100.3, "evaluator_ms": 700.0},
        {"event": "EvaluatorRan", "iteration": 2, "phase": "validate", "began_s": 100.5, "evaluator_ms": 1000.0,
         "call_ms": 1500.0},
        {"event": "EvaluatorRan", "iteration": 2, "phase": "time", "began_s": 101.5, "evaluator_ms": 400.0},
        {"event": "NodeStarted", "node": "evaluate", "iteration": 1},
        {"event": "CaseFinished", "iteration": 1, "elapsed_ms": 500.0},
        {"event": "NodeStarted", "node": "reflect", "iteration": 1},
        {"event": "CaseFinished", "iteration": 1, "elapsed_ms": 800.0},  # a re-timing: not the attempt's own
        {"event": "NodeStarted", "node": "evaluate", "iteration": 2},
        {"event": "CaseFinished", "iteration": 2, "elapsed_ms": 900.0},
        {"event": "CaseFinished", "iteration": 0, "elapsed_ms": 5000.0},  # the plan's: not an attempt's
    ]
    evaluator_share(records)
    out = capsys.readouterr().out
    # spans [100, 100.2], [100.3, 101.0], [100.5, 101.5], [101.5, 101.9]: busy 1.8 s of 1.9 s
    assert "busy with attempts 1.8 s of the 1.9 s from the first to the last (95%)" in out
    assert "per attempt 1150 ms, of which the worker's cases 700 ms" in out
    # (914 - 900) for attempt 1, (1500 - 1400) for attempt 2: 57 ms per attempt
    assert "the Ray hop 57.0 ms per attempt over the evaluator's own" in out


def test_search_speeds_running_time_reads_each_attempts_seconds_across_a_resume(tmp_path, capsys):
    """benchmarks/search_speed.py's running-time lines (a 10-minute session in two parts):
    one entry per attempt from the checkpoint's history, in order, ending at the session's
    own time spent, the best as it stood after each attempt."""
    from warpsmith.agent.loop import events
    from warpsmith.agent.tracking.session_tracker import NullTracker
    search_speed = _search_speed()
    reached_target, running_progress, running_report = (search_speed.reached_target, search_speed.running_progress,
                                                        search_speed.running_report)
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    directory = session_dir(tmp_path / "store", "s1")
    directory.mkdir(parents=True)
    info = SessionInfo("s1", str(workload.directory), SearchOptions(ProposerChoice(kernel="tiled"), budget=6))

    def open_session():
        return Session(info, directory, workload, EvaluatorDouble(workload), TuneProposer(0, kernel="tiled"),
                       NullTracker())
    first = open_session()

    def pause_after_three(e):
        if isinstance(e, events.AttemptFinished) and e.iteration == 3:
            first.control.request("pause")
    assert first.run(pause_after_three) == "paused"
    first.close()
    second = open_session()
    assert second.run() == "finished"
    progress = running_progress(directory)
    assert [n for n, _, _ in progress] == list(range(1, 7))
    seconds = [s for _, s, _ in progress]
    assert seconds == sorted(seconds) and seconds[-1] == second.state["spent"].elapsed_s
    best = second.state["best"].score_ms
    assert progress[-1][2] == best and all(b is None or b >= best for _, _, b in progress)
    running_report(directory, best)
    out = capsys.readouterr().out
    reached = next(s for _, s, b in progress if b is not None and b <= best * 1.02)
    assert f"running time: 6 attempts in {seconds[-1]:.1f} s" in out and f"after {reached:.1f} s of running" in out
    # --stop-at-target's question, asked of the checkpoint (read-only) as the session writes it
    assert reached_target(tmp_path / "store", best * 1.01) and not reached_target(tmp_path / "store", best * 0.9)
    assert not reached_target(tmp_path / "nothing-yet", best)
    second.close()


def test_search_speeds_second_part_passes_resume_only_the_evaluations_flags():
    """`resume` has no --batch or --no-early-reject (the checkpoint keeps the search's own):
    part 2 of a 10-minute session forwards the evaluation's flags with their values."""
    resume_flags = _search_speed().resume_flags
    flags = ["--batch", "4", "--backend", "ray", "--ray-gpus=1", "--no-early-reject", "--hot", "--timeout", "5"]
    assert resume_flags(flags) == ["--backend", "ray", "--ray-gpus=1", "--hot", "--timeout", "5"]
