"""One lifecycle, one end: however a session ends (finished, stopped now, stopped after
the step, failed by an exception, no GPU), headless or in the app, its end is written to
session.json once and its MLflow run's status is set once. An EvaluatorDouble stands in
for the GPU; the tracker, checkpoint and session folder are real, their writes counted."""

from __future__ import annotations

import asyncio
import threading

import pytest
from app_factory import wait_for
from evaluator_double import EvaluatorDouble, Gate
from mlflow.tracking import MlflowClient
from workload_factory import make_sgemm_workload

from warpsmith.agent.cli.sessions import drive_session
from warpsmith.agent.loop.options import SearchOptions, SessionOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker
from warpsmith.agent.worker.process import GpuUnavailable

# way -> (session.json's status, the MLflow run's status, the exit code headless)
WAYS = {"finished": ("finished", "FINISHED", 0), "stop_now": ("stopped", "KILLED", 130),
        "stop_after_step": ("stopped", "KILLED", 130), "exception": ("failed", "FAILED", 1),
        "no_gpu": ("failed", "FAILED", 3)}


class CountedSession:
    """A real session whose status writes (session.json) and MLflow status writes are recorded."""

    def __init__(self, tmp_path, monkeypatch, way: str):
        workload = load_workload(make_sgemm_workload(tmp_path / "w"))
        store = tmp_path / "store"
        tracker = Tracker(store)
        self.gate = Gate(free=1) if way in ("stop_now", "stop_after_step") else None
        evaluator = EvaluatorDouble(workload, gate=self.gate, raise_at={"exception": 2, "no_gpu": 1}.get(way),
                                    error=GpuUnavailable("no CUDA device (EvaluatorDouble)") if way == "no_gpu" else None)
        directory = session_dir(store, "s1")
        directory.mkdir(parents=True)
        search = SearchOptions(ProposerChoice(kernel="tiled"), budget=3)
        info = SessionInfo("s1", str(workload.directory), search)
        info.mlflow_run_id = tracker.start(workload.name, "s1", {"proposer": "tune"})
        info.save(directory)
        self.session = Session(info, directory, workload, evaluator, TuneProposer(0, kernel="tiled"), tracker)
        self.options = SessionOptions(search)
        self.statuses: list[str] = []  # every status session.json was written with, from here on
        self.mlflow: list[str] = []  # every status the session's MLflow run was set to (not its attempts')
        save, terminate = SessionInfo.save, tracker.client.set_terminated

        def counted_save(info, directory):
            self.statuses.append(info.status)
            save(info, directory)

        def counted_terminate(run_id, status=None, *args, **kwargs):
            if run_id == info.mlflow_run_id:
                self.mlflow.append(status)
            return terminate(run_id, status, *args, **kwargs)
        monkeypatch.setattr(SessionInfo, "save", counted_save)
        monkeypatch.setattr(tracker.client, "set_terminated", counted_terminate)

    def assert_ended_once(self, status: str, mlflow_status: str) -> None:
        assert self.statuses == ["running", status]
        assert self.mlflow == [mlflow_status]
        assert self.session.ended == status and SessionInfo.load(self.session.dir).status == status
        run = MlflowClient(self.session.tracker.uri).get_run(self.session.info.mlflow_run_id)
        assert run.info.status == mlflow_status


def _stop_when_held(counted: CountedSession, way: str) -> None:
    """From another thread, as SIGTERM or the app would: stop once the second evaluation is in flight."""
    gate, session = counted.gate, counted.session
    if gate is None:
        return

    def stop():
        gate.held.wait(120)
        if way == "stop_now":
            session.stop_now()  # never released: the GPU work in flight is killed
        else:
            session.stop_after_step()
            gate.release()
    threading.Thread(target=stop, daemon=True).start()


@pytest.mark.parametrize("way", list(WAYS))
def test_headless_session_records_its_end_once(tmp_path, monkeypatch, capsys, way):
    """`run`/`resume`/`bench` headless: each way of ending writes one end to session.json and one MLflow status."""
    counted = CountedSession(tmp_path, monkeypatch, way)
    status, mlflow_status, code = WAYS[way]
    _stop_when_held(counted, way)
    assert drive_session(counted.session) == code
    counted.assert_ended_once(status, mlflow_status)
    if way == "no_gpu":
        assert "no usable GPU: no CUDA device (EvaluatorDouble)" in capsys.readouterr().err


@pytest.mark.parametrize("way", list(WAYS))
def test_app_session_records_its_end_once(tmp_path, monkeypatch, way):
    """In the app (x, s, or no key) the app ends the session; the CLI's end after the front end records nothing more."""
    from warpsmith.tui.app import WarpsmithApp
    counted = CountedSession(tmp_path, monkeypatch, way)
    status, mlflow_status, _ = WAYS[way]
    given = []

    def front_end(session, options):
        given.append(options)
        app = WarpsmithApp(session)

        async def drive():
            async with app.run_test(size=(160, 50)) as pilot:
                if counted.gate is not None:
                    await wait_for(pilot, counted.gate.held.is_set)
                    await pilot.press("x" if way == "stop_now" else "s")
                    if way == "stop_after_step":
                        counted.gate.release()
                await wait_for(pilot, lambda: app.view.state in ("finished", "stopped", "failed"))
        asyncio.run(drive())
        return app.status
    drive_session(counted.session, counted.options, front_end)
    assert given == [counted.options]
    counted.assert_ended_once(status, mlflow_status)


def test_end_is_recorded_once_from_any_caller(tmp_path, monkeypatch):
    """A second end() (the CLI after the app, a late SIGTERM) changes nothing and returns the first status."""
    counted = CountedSession(tmp_path, monkeypatch, "finished")
    session = counted.session
    assert session.end(session.run()) == "finished"
    assert session.end("stopped") == "finished"
    session.close()
    counted.assert_ended_once("finished", "FINISHED")
