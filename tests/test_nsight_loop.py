"""--use-nsight in the loop, and the speed-of-light flag. An EvaluatorDouble
stands in for the GPU and NcuDouble (tests/ncu_double.py, replaying ncu's CSV
recorded on the H200) for Nsight Compute; this machine has neither."""

from __future__ import annotations

import os
import sys

import pytest
from evaluator_double import EvaluatorDouble
from mlflow.tracking import MlflowClient
from workload_factory import make_sgemm_workload

from warpsmith.agent.loop import events
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.base import ProposalContext
from warpsmith.agent.proposers.prompt import latest_findings, user_message
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


@pytest.fixture
def ncu_on_path(tmp_path, monkeypatch):
    """An `ncu` on PATH that runs NcuDouble."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE}/ncu_double.py" "$@"\n')
    ncu.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return ncu


def session(tmp_path, workload, budget, evaluator=None, nsight=True):
    store = tmp_path / "store"
    info = SessionInfo("s1", str(workload.directory), SearchOptions(budget=budget, nsight=nsight))
    tracker = Tracker(store)
    directory = session_dir(store, "s1")
    directory.mkdir(parents=True, exist_ok=True)
    info.mlflow_run_id = tracker.start(workload.name, "s1", {"proposer": "tune"})
    info.save(directory)
    return Session(info, directory, workload, evaluator or EvaluatorDouble(workload), TuneProposer(0), tracker)


def test_profiles_reach_the_state_the_prompt_and_mlflow(tmp_path, workload, ncu_on_path):
    s = session(tmp_path, workload, 3)
    seen = []
    assert s.run(seen.append) == "finished"
    st = s.state
    ok = [a for a in st["history"] if a.status == "ok"]
    assert ok and all(len(a.profile) == 1 and a.profile[0].case == "square-256" for a in ok)
    p = ok[0].profile[0]
    assert p.metrics["registers_per_thread"] == 127 and p.metrics["duration_ns"] == pytest.approx(171632, rel=1e-3)
    assert st["best"].profile == next(a for a in reversed(ok) if a.new_best).profile
    profiled = [e for e in seen if isinstance(e, events.Profiled)]
    assert len(profiled) == len(ok) and "sgemm_tiled" in profiled[0].summaries[0]
    started = [e.node for e in seen if isinstance(e, events.NodeStarted)]
    assert started[:5] == ["plan", "propose", "evaluate", "profile", "reflect"]
    assert (s.dir / "profiles" / "attempt-001.ncu.csv").is_file()

    ctx = ProposalContext(workload, DeviceFacts(), 4, "optimise", st["history"], st["best"], st["history"][-1])
    text = user_message(ctx)
    assert "# Nsight Compute on the best kernel" in text and "127 regs/thread" in text
    assert latest_findings(ctx) and "What it suggests: " in text

    client = MlflowClient(s.tracker.uri)
    run = client.get_run(s.info.mlflow_run_id)
    assert run.data.metrics["ncu.achieved_occupancy_pct.square-256"] == pytest.approx(6.06, abs=0.01)
    files = [f.path for f in client.list_artifacts(run.info.run_id, "attempts/001")]
    assert "attempts/001/profile.json" in files


def test_missing_ncu_is_one_notice_and_the_run_goes_on(tmp_path, workload, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    seen = []
    assert session(tmp_path, workload, 3).run(seen.append) == "finished"
    notices = [e.text for e in seen if isinstance(e, events.Notice)]
    assert len(notices) == 1 and "ncu (Nsight Compute) is not on PATH" in notices[0]
    assert not any(isinstance(e, events.Profiled) for e in seen)


def test_counter_permission_turns_profiling_off(tmp_path, workload, ncu_on_path, monkeypatch):
    monkeypatch.setenv("NCU_DOUBLE_MODE", "perm")
    seen = []
    s = session(tmp_path, workload, 3)
    assert s.run(seen.append) == "finished"
    notices = [e.text for e in seen if isinstance(e, events.Notice)]
    assert len(notices) == 1 and "ERR_NVGPUCTRPERM" in notices[0] and "off for this session" in notices[0]
    assert all(not a.profile for a in s.state["history"])


def test_faster_than_the_floor_is_suspect_and_must_pass_fresh_inputs(tmp_path, workload):
    """A 1 ns median on a 256^3 GEMM beats any GPU: flagged, and a fresh-seed failure keeps it out."""
    ev = EvaluatorDouble(workload, score=lambda d: 1e-6 if d.get("BK") == 16 else 1.0, fresh_fail={"BK=16"})
    s = session(tmp_path, workload, 15, ev, nsight=False)
    s.run()
    suspects = [a for a in s.state["history"] if a.suspect]
    assert suspects and all(a.defines.get("BK") == 16 for a in suspects)
    assert all(not a.new_best for a in suspects)
    assert "SUSPECT" in suspects[0].detail and suspects[0].status == "wrong_answer"
    assert s.state["best"].score_ms >= 1.0


def test_ncu_timeout_kills_the_profiled_process_too(tmp_path, workload, ncu_on_path, monkeypatch):
    """ncu past its time limit: one transient notice, and the program it started is
    not left behind holding the GPU."""
    from warpsmith.agent.evaluate.records import CandidateSpec
    from warpsmith.agent.profiling.nsight import Nsight
    from warpsmith.agent.profiling.profiler import ProfilerUnavailable
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("NCU_DOUBLE_MODE", "hang")
    monkeypatch.setenv("NCU_DOUBLE_PIDFILE", str(pidfile))
    spec = CandidateSpec(name="k", source="", entry="k", grid=["1"], block=["32"])
    with pytest.raises(ProfilerUnavailable, match="ncu took longer than 2 s") as e:
        Nsight(workload.directory, tmp_path / "ncu", timeout_s=2.0).profile(spec, ["square-256"])
    assert e.value.transient
    assert_gone(int(pidfile.read_text()))


def assert_gone(pid: int) -> None:
    import time
    for _ in range(50):  # SIGKILLed with its group; gone once reaped by init
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            return
        time.sleep(0.1)
    pytest.fail(f"the profiled process {pid} outlived ncu")


def test_ctrl_c_during_ncu_kills_the_profiled_process_too(tmp_path, workload, ncu_on_path, monkeypatch):
    """ncu runs in its own process group, which the terminal's SIGINT does not reach:
    a KeyboardInterrupt while waiting for it must take the group down itself."""
    import subprocess
    import time

    from warpsmith.agent.evaluate.records import CandidateSpec
    from warpsmith.agent.profiling.nsight import Nsight
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("NCU_DOUBLE_MODE", "hang")
    monkeypatch.setenv("NCU_DOUBLE_PIDFILE", str(pidfile))
    real = subprocess.Popen.communicate

    def interrupted(self, *args, **kwargs):
        if kwargs.get("timeout") == 30.0:  # the wait for ncu: Ctrl-C once the child is up
            while not pidfile.exists():
                time.sleep(0.05)
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)
    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    spec = CandidateSpec(name="k", source="", entry="k", grid=["1"], block=["32"])
    with pytest.raises(KeyboardInterrupt):
        Nsight(workload.directory, tmp_path / "ncu", timeout_s=30.0).profile(spec, ["square-256"])
    assert_gone(int(pidfile.read_text()))


def test_app_view_keeps_the_profile_of_the_candidate_and_of_the_best(tmp_path, workload, ncu_on_path):
    """The app's profile tab: the current candidate's Nsight lines, and the best's once it wins."""
    from warpsmith.tui.run_view import RunView
    view = RunView(workload.name, "tune")
    view.cases = {}
    session(tmp_path, workload, 2).run(view.apply)
    assert view.profile and view.profile[0].startswith("square-256: sgemm_tiled:")
    assert any(line.startswith("suggests: ") for line in view.profile)
    assert view.best_profile and view.best_profile[0].startswith("square-256: ")
