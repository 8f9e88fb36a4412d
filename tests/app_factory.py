"""Apps for tests: a real Session (graph, checkpointer, MLflow, tune proposer)
with an EvaluatorDouble standing in for the GPU."""

from __future__ import annotations

from pathlib import Path

from evaluator_double import EvaluatorDouble, Gate, knob_score
from workload_factory import make_sgemm_workload

from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker
from warpsmith.tui.app import WarpsmithApp
from warpsmith.tui.screens.runs import RunsSource


def make_session(tmp: Path, budget: int, session_id: str = "s1", delay_s: float = 0.05,
                 gate: Gate | None = None) -> Session:
    workload = load_workload(make_sgemm_workload(tmp / "w")) if not (tmp / "w").exists() else load_workload(tmp / "w")
    store = tmp / "store"
    tracker = Tracker(store)
    directory = session_dir(store, session_id)
    if (directory / "session.json").is_file():
        info = SessionInfo.load(directory)
        tracker.reopen(info.mlflow_run_id)
    else:
        directory.mkdir(parents=True, exist_ok=True)
        info = SessionInfo(session_id, str(workload.directory), SearchOptions(budget=budget))
        info.mlflow_run_id = tracker.start(workload.name, session_id, {"proposer": "tune", "budget": budget})
        info.save(directory)
    evaluator = EvaluatorDouble(workload, score=lambda d: knob_score(d) if d else 3.0, delay_s=delay_s,
                                gate=gate)
    return Session(info, directory, workload, evaluator, TuneProposer(0), tracker)


def make_app(tmp: Path, budget: int, **kw) -> WarpsmithApp:
    session = make_session(tmp, budget, **kw)
    return WarpsmithApp(session, RunsSource(session.tracker), lambda sid: make_session(tmp, budget, sid, 0.0))


async def wait_for(pilot, condition, timeout_s: float = 60.0) -> None:
    import time
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the app did not reach the expected state in time")
        await pilot.pause(0.05)
