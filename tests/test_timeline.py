"""The session's timeline: every loop event with its time, kinds and timing facts only.
An EvaluatorDouble stands in for the GPU; the session, checkpoint and tracker are real."""

from __future__ import annotations

from evaluator_double import EvaluatorDouble
from workload_factory import make_sgemm_workload

from agent.loop.options import SearchOptions
from agent.loop.session import Session, SessionInfo, session_dir
from agent.loop.timeline import FILE, read_timeline
from agent.proposers.choice import ProposerChoice
from agent.proposers.tune import TuneProposer
from agent.spec.workload import load_workload
from agent.tracking.tracker import Tracker


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
    assert {("compile", i) for i in (1, 2, 3)} <= set(started)
    assert sum(r["event"] == "NodeFinished" and r["node"] == "benchmark" for r in records) >= 1
    cases = [r for r in records if r["event"] == "CaseFinished"]
    assert cases and all("elapsed_ms" in r for r in cases)  # the worker's time per case (search_speed.py sums it)
    compiles = [r for r in records if r["event"] == "CompileFinished"]
    assert compiles and all(isinstance(r["cached"], bool) and "compile_ms" in r for r in compiles)
    text = (directory / FILE).read_text()
    source = workload.kernels["tiled"].source()
    assert "__global__" in source and "__global__" not in text and "tiled" not in text
