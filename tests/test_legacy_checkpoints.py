"""Sessions stored by earlier versions still load and resume: those whose checkpoints name
their types by module paths (the flat layout's `agent.loop_state.Best`, `agent.limits.Spent`...,
and agent/ in subpackages installed as the package agent), and those paused inside an attempt
when compile, validate and benchmark were nodes of the graph."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from evaluator_double import EvaluatorDouble
from test_checkpoint_tags import stored_type_names
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.results import Progress, Status
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.session_tracker import NullTracker
from warpsmith.agent.tracking.tracker import Tracker

FIXTURES = Path(__file__).parent / "fixtures"


def open_fixture(tmp_path, name: str) -> Session:
    """The stored session fixtures/`name` (tune attempts on the factory's sgemm), opened on a copy."""
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    store = tmp_path / "store"
    directory = session_dir(store, name.removeprefix("session-"))
    shutil.copytree(FIXTURES / name, directory)
    info = SessionInfo.load(directory)
    info.workload = str(workload.directory)
    tracker = Tracker(store)
    info.mlflow_run_id = tracker.start(workload.name, info.id, {"proposer": "tune", "budget": info.search.budget})
    return Session(info, directory, workload, EvaluatorDouble(workload), TuneProposer(info.search.proposer.seed), tracker)


def test_session_stored_before_the_rehouse_resumes(tmp_path):
    """The fixture (2 tune attempts, written by the flat layout) reads back its best and resumes for one more."""
    session = open_fixture(tmp_path, "session-before-rehouse")
    before = session.state
    assert before["iteration"] == 2 and before["best"].score_ms == 1.375
    assert before["spent"].elapsed_s >= 0
    # statuses stored as text before the Status enum read back as its members, and compare equal
    stored = [a.status for a in before["history"]] + [c.status for c in before["best"].cases]
    assert stored and all(isinstance(s, (Status, Progress)) for s in stored), stored
    assert before["best"].cases[0].status == Status.OK and before["best"].cases[0].status == "ok"
    assert Status.OK in [a.status for a in before["history"]]
    facts = DeviceFacts.from_dict(before["facts"])  # stored as a dict by the double, with six facts
    assert (facts.name, facts.sm_count, facts.total_memory) == ("EvaluatorDouble (no GPU)", 132, 0)
    session.set_budget(3)
    seen = []
    assert session.end(session.run(seen.append)) == "finished", seen
    after = session.state
    assert [a.iteration for a in after["history"]] == [1, 2, 3]
    assert after["best"].score_ms <= 1.375


PAUSED = Path(__file__).parent / "fixtures" / "sessions-paused-mid-attempt"


@pytest.mark.parametrize("node", ["compile", "validate", "benchmark"])
def test_a_session_paused_before_a_node_of_the_old_attempt_chain_resumes(tmp_path, node):
    """Stores written when compile, validate and benchmark were nodes of their own, each paused inside
    attempt 2 with `node` next (one checkpoint file, a session each): the attempt is evaluated whole and the
    session goes on to its budget of 3."""
    workload = load_workload(make_sgemm_workload(tmp_path / "w"))
    after = {"compile": "propose", "validate": "compile", "benchmark": "validate"}[node]
    session_id = f"paused-after-{after}"
    directory = session_dir(tmp_path / "store", session_id)
    directory.mkdir(parents=True)
    shutil.copy(PAUSED / "checkpoint.sqlite", directory / "checkpoint.sqlite")
    shutil.copy(PAUSED / f"{session_id}.json", directory / "session.json")
    info = SessionInfo.load(directory)
    info.workload = str(workload.directory)
    session = Session(info, directory, workload, EvaluatorDouble(workload), TuneProposer(info.search.proposer.seed),
                      NullTracker())
    before = session.state
    assert before["iteration"] == 1 and before["attempt"].iteration == 2
    in_flight = before["pending"].name
    assert session.end(session.run()) == "finished"
    history = session.state["history"]
    assert [a.iteration for a in history] == [1, 2, 3]
    assert history[1].name == in_flight and history[1].status == Status.OK and history[1].score_ms is not None
    session.close()


def test_session_stored_before_the_tags_resumes(tmp_path):
    """The fixture (3 tune attempts, written while agent/ was the package agent: every type named by its
    module path there) reads back its history, best, result and spending, resumes for one more, and what it
    writes from then on names tags only."""
    session = open_fixture(tmp_path, "session-before-tags")
    before = session.state
    assert before["iteration"] == 3 and before["best"].score_ms == 1.375
    assert [a.status for a in before["history"]] == [Status.OK, Status.OK, Status.REJECTED_EARLY]
    assert all(isinstance(c.status, Status) for c in before["best"].cases)
    assert before["result"] is not None and before["result"].served_by == "best" and before["result"].cases
    assert before["spent"].elapsed_s > 0 and before["libraries"] and before["start"] is not None
    assert set(before["winners"]) and all(w.spec.name for w in before["winners"].values())
    session.set_budget(4)
    assert session.end(session.run()) == "finished"
    after = session.state
    assert [a.iteration for a in after["history"]] == [1, 2, 3, 4]
    assert after["history"][:3] == before["history"]
    assert {module for module, _ in stored_type_names(session.dir / "checkpoint.sqlite", latest=True)} == {"warpsmith"}
