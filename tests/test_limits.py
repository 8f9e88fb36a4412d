"""Every limit ends a session at the right point and says which one did: time,
tokens, dollars, patience; raised on resume, the session goes on. An
EvaluatorDouble stands in for the GPU; the tune proposer costs nothing, so a
token/dollar-charging proposer double wraps it."""

from __future__ import annotations

import dataclasses

import pytest
from evaluator_double import EvaluatorDouble
from workload_factory import make_sgemm_workload

from warpsmith.agent.loop.limits import Limits
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.session_tracker import NullTracker


class ChargingProposerDouble:
    """The tuner's proposals, each billed as if a model had made it."""

    name = "tune"

    def __init__(self, tokens: int, cost_usd: float):
        self.inner, self.tokens, self.cost_usd = TuneProposer(0, kernel="tiled"), tokens, cost_usd

    def propose(self, ctx):
        return dataclasses.replace(self.inner.propose(ctx), tokens=self.tokens, cost_usd=self.cost_usd)


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def session(tmp_path, workload, limits: dict, proposer=None, evaluator=None, budget=50):
    info = SessionInfo("s1", str(workload.directory), SearchOptions(budget=budget, limits=Limits().merged(limits)))
    directory = session_dir(tmp_path / "store", "s1")
    directory.mkdir(parents=True, exist_ok=True)
    return Session(info, directory, workload, evaluator or EvaluatorDouble(workload),
                   proposer or TuneProposer(0, kernel="tiled"), NullTracker())


def test_token_budget(tmp_path, workload):
    s = session(tmp_path, workload, {"tokens": 2500}, ChargingProposerDouble(1000, 0.0))
    assert s.end(s.run()) == "finished"
    assert s.state["iteration"] == 3 and s.state["finished"] == "token budget (3000 of 2500)"
    assert "ended by the token budget" in (s.dir / "best" / "report.md").read_text()


def test_cost_budget(tmp_path, workload):
    s = session(tmp_path, workload, {"cost_usd": 0.05}, ChargingProposerDouble(10, 0.02))
    s.run()
    assert s.state["iteration"] == 3 and s.state["finished"].startswith("cost budget ($0.0600 of $0.05)")


def test_time_budget(tmp_path, workload):
    """Each evaluation takes at least 0.1 s here: a 0.25 s budget allows the attempt that crosses
    it, then stops -- after at most 3 attempts however slow the machine, never the 50 of the budget."""
    s = session(tmp_path, workload, {"time_s": 0.25}, evaluator=EvaluatorDouble(workload, delay_s=0.1))
    s.run()
    assert s.state["finished"].startswith("time budget") and 1 <= s.state["iteration"] <= 3
    assert s.state["spent"].elapsed_s >= 0.25


def test_patience(tmp_path, workload):
    """Nothing beats the starting kernel here: patience 4 stops after 4 attempts."""
    s = session(tmp_path, workload, {"patience": 4}, evaluator=EvaluatorDouble(workload, score=lambda d: 1.0))
    s.run()
    assert s.state["iteration"] == 4 and s.state["finished"] == "patience (4 attempts without a new best)"


def test_raising_a_limit_on_a_finished_session_continues_it(tmp_path, workload):
    s = session(tmp_path, workload, {"tokens": 1500}, ChargingProposerDouble(1000, 0.0))
    s.run()
    assert s.state["iteration"] == 2
    s.set_limits(tokens=4500)
    assert s.run() == "finished" and s.state["iteration"] == 5 and s.state["finished"].startswith("token budget")
    s.set_limits(tokens=0)  # 0 removes the limit: the iteration budget ends it
    s.control.set_budget(7)
    s.run()
    assert s.state["iteration"] == 7 and s.state["finished"] == "budget"


def test_limit_changed_while_running(tmp_path, workload):
    s = session(tmp_path, workload, {}, evaluator=EvaluatorDouble(workload, score=lambda d: 1.0), budget=20)
    s.control.set_limits(patience=2)
    s.run()
    assert s.state["iteration"] == 2 and s.state["limits"].patience == 2


def test_paused_time_does_not_count(tmp_path, workload):
    """Paused mid-attempt for a while, then resumed: the wait is not charged to the time budget."""
    import time
    s = session(tmp_path, workload, {"time_s": 30.0}, evaluator=EvaluatorDouble(workload, delay_s=0.05), budget=3)
    s.control.request("pause")
    t0 = time.monotonic()
    assert s.run() == "paused"
    running_s = time.monotonic() - t0
    time.sleep(1.0)
    t0 = time.monotonic()
    s.run()
    running_s += time.monotonic() - t0  # however slow this machine, the charge is within the two run() calls
    assert s.state["spent"].elapsed_s <= running_s + 0.01 and s.state["finished"] == "budget"


def test_exhausted_search_space_ends_the_session(tmp_path, workload):
    """Once the tuner has tried every configuration the session ends, naming why,
    instead of spending the rest of its budget on empty attempts."""
    s = session(tmp_path, workload, {}, budget=10_000)
    assert s.end(s.run()) == "finished"
    history = s.state["history"]
    assert s.state["finished"].startswith("tuner's search space (every configuration of tiled's 5 knobs")
    assert len(history) == s.state["iteration"] < 10_000 and all(a.status != "proposal_invalid" for a in history)
    assert f": {len(history)} tried, " in s.state["finished"]
    assert len({tuple(sorted(a.defines.items())) for a in history}) == len(history)
    assert "ended by the tuner's search space" in (s.dir / "best" / "report.md").read_text()
