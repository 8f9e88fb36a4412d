"""The LangGraph loop end to end with the tune proposer: budget, best selection,
pause / budget change / resume through the SQLite checkpointer, MLflow read back.
An EvaluatorDouble stands in for the GPU (this machine has none)."""

from __future__ import annotations

import pytest
from evaluator_double import EvaluatorDouble, knob_score
from mlflow.tracking import MlflowClient
from workload_factory import make_sgemm_workload

from warpsmith.agent.loop import events
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def open_session(tmp_path, workload, budget, evaluator=None, session_id="s1", seed=0, **search):
    store = tmp_path / "store"
    info = SessionInfo(session_id, str(workload.directory), SearchOptions(ProposerChoice(seed=seed), budget, **search))
    tracker = Tracker(store)
    directory = session_dir(store, session_id)
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "session.json").is_file():
        info = SessionInfo.load(directory)
        tracker.reopen(info.mlflow_run_id)
    else:
        info.mlflow_run_id = tracker.start(workload.name, session_id, {"proposer": "tune", "budget": budget})
        info.save(directory)
    # Compiling nothing ahead: with it, a step takes only the neighbours compiled already while any are, so
    # its size would be the compile pool's race; here it depends on the history alone (tests/test_tune.py
    # covers compiling ahead).
    return Session(info, directory, workload, evaluator or EvaluatorDouble(workload), TuneProposer(seed, ahead=0), tracker)


def test_the_plan_lets_the_proposer_start_before_the_baselines(tmp_path, workload):
    """The plan node calls the proposer's prepare() (the tuner: the first step's compiles) before it times the
    baselines, with the GPU's facts and an empty history; the session then runs as usual."""
    order = []

    class Preparing(TuneProposer):
        def prepare(self, ctx):
            order.append(("prepare", ctx.facts.arch, len(ctx.history)))
            super().prepare(ctx)

    class Double(EvaluatorDouble):
        def baseline(self, *a, **k):
            order.append(("baseline",))
            return super().baseline(*a, **k)

    s = open_session(tmp_path, workload, 2, evaluator=Double(workload))
    s.proposer = Preparing(0, ahead=0)
    assert s.end(s.run()) == "finished"
    assert order[:2] == [("prepare", "sm_90", 0), ("baseline",)]
    assert len(s.state["history"]) == 2


def test_tune_session_runs_to_budget_and_improves(tmp_path, workload):
    """Eight tune iterations: eight attempts, a best better than the start, run FINISHED in MLflow."""
    s = open_session(tmp_path, workload, 8)
    seen = []
    assert s.end(s.run(seen.append)) == "finished"  # the end records the best kernel and the run's status
    st = s.state
    assert st["iteration"] == 8 and len(st["history"]) == 8 and st["finished"] == "budget"
    assert st["best"].score_ms < knob_score({}) - 0.05  # better than the defaults
    assert st["start"].spec.name == "naive"
    assert len({tuple(sorted(a.defines.items())) for a in st["history"]}) == 8  # never the same config twice
    assert any(isinstance(e, events.NewBest) and e.iteration > 0 for e in seen)
    nodes = [e.node for e in seen if isinstance(e, events.NodeFinished)]
    assert nodes[:4] == ["plan", "propose", "evaluate", "reflect"]
    started = [e.node for e in seen if isinstance(e, events.NodeStarted)]
    assert started[:4] == nodes[:4]
    assert any(isinstance(e, events.CompileFinished) and e.ok for e in seen)
    assert (s.dir / "best" / "kernel.cu").read_text() == st["best"].spec.source
    assert "| square-256 |" in (s.dir / "best" / "report.md").read_text()
    client = MlflowClient(s.tracker.uri)
    run = client.get_run(s.info.mlflow_run_id)
    assert run.info.status == "FINISHED" and run.data.params["proposer"] == "tune"
    assert run.data.params["gpu"] == "EvaluatorDouble (no GPU)" and run.data.params["arch"] == "sm_90"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "ok")]
    assert steps == list(range(1, 9))
    assert client.get_metric_history(run.info.run_id, "best_score_ms")[-1].value == pytest.approx(st["best"].score_ms)
    arts = [a.path for a in client.list_artifacts(run.info.run_id, "attempts/001")]
    assert "attempts/001/kernel.cu" in arts and "attempts/001/result.json" in arts
    assert "best/launch.json" in [a.path for a in client.list_artifacts(run.info.run_id, "best")]


def test_pause_then_change_budget_then_resume(tmp_path, workload):
    """Pause stops at the next step boundary; a new budget set while paused ends the resumed run there."""
    s = open_session(tmp_path, workload, 10)
    def pause_after_two(e):
        if isinstance(e, events.AttemptFinished) and e.iteration == 2:
            s.control.request("pause")
    assert s.run(pause_after_two) == "paused"
    assert s.state["iteration"] == 2
    s.set_budget(4)
    s.close()
    resumed = open_session(tmp_path, workload, 10)
    assert resumed.run() == "finished"
    assert resumed.state["iteration"] == 4 and len(resumed.state["history"]) == 4


def test_budget_change_while_running(tmp_path, workload):
    """A budget lowered while running takes effect at once: the run ends at the new budget."""
    s = open_session(tmp_path, workload, 20)
    changed = []
    def shrink(e):
        if isinstance(e, events.AttemptFinished) and e.iteration == 1:
            s.control.set_budget(3)
        if isinstance(e, events.BudgetChanged):
            changed.append((e.old, e.new))
    assert s.run(shrink) == "finished"
    assert s.state["iteration"] == 3 and changed == [(20, 3)]


def test_resume_after_a_crash_continues_from_the_checkpoint(tmp_path, workload):
    """A process that dies mid-session resumes at the last checkpoint without losing attempts."""
    crashing = EvaluatorDouble(workload, raise_at=9)
    s = open_session(tmp_path, workload, 6, evaluator=crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        s.run()
    done = s.state["iteration"]
    assert 0 < done < 6
    s.close()
    resumed = open_session(tmp_path, workload, 6)
    assert resumed.run() == "finished"
    assert [a.iteration for a in resumed.state["history"]] == list(range(1, 7))


def test_failures_count_and_keep_their_report(tmp_path, workload):
    """A wrong answer counts against the budget; its mismatch report stays in the history for the proposer."""
    ev = EvaluatorDouble(workload, fail={"BM=64,BN=64,BK=8,TM=8,TN=8": "wrong_answer"})
    s = open_session(tmp_path, workload, 3, evaluator=ev)
    s.run()
    first = s.state["history"][0]
    assert first.status == "wrong_answer" and "only rows >= 64" in first.detail
    assert s.state["iteration"] == 3


def test_fresh_seed_failure_never_becomes_best(tmp_path, workload):
    """A candidate that passes seed 1 but fails fresh inputs is rejected as wrong_answer."""
    ev = EvaluatorDouble(workload, fresh_fail={"BM=64,BN=64,BK=8,TM=8,TN=8"}, score=lambda d: 1.0 if d else 2.0)
    s = open_session(tmp_path, workload, 1, evaluator=ev)
    s.run()
    attempt = s.state["history"][0]
    assert attempt.status == "wrong_answer" and "fresh inputs" in attempt.detail
    assert s.state["best"].spec.name == "naive"


def test_api_key_is_never_stored(tmp_path, workload, monkeypatch):
    """OPENAI_API_KEY appears in no MLflow param, artifact, checkpoint or session file."""
    secret = "sk-warpsmith-test-secret-7f3a9c"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    s = open_session(tmp_path, workload, 3)
    s.end(s.run())
    s.close()
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_close_challenger_is_retimed_interleaved(tmp_path, workload):
    """A challenger within 3% of the best is re-timed against it, interleaved, before it can win."""
    ev = EvaluatorDouble(workload, score=lambda d: 0.99 if d else 1.0)
    s = open_session(tmp_path, workload, 1, evaluator=ev)
    s.run()
    timed = [name for name, seed, time_cases in ev.calls if time_cases and seed == 1]
    # plan: start; benchmark: challenger; re-timing: best, challenger, best, challenger
    assert timed[-4:] == ["naive", timed[-1], "naive", timed[-1]] and timed[-1].startswith("tiled@")
    assert s.state["best"].spec.name.startswith("tiled@")  # 1% faster: beyond the 0.5% noise bar


def test_ctrl_c_stops_cleanly_and_resumes(tmp_path, workload, capsys):
    """Ctrl-C mid-node: exit 130, MLflow run KILLED, best kernel saved, and the session resumes to its budget."""
    from warpsmith.agent.cli.sessions import drive_session
    s = open_session(tmp_path, workload, 6, evaluator=EvaluatorDouble(workload, interrupt_at=8))
    assert drive_session(s) == 130
    assert "Resume with: warpsmith resume s1" in capsys.readouterr().err
    assert MlflowClient(s.tracker.uri).get_run(s.info.mlflow_run_id).info.status == "KILLED"
    assert (s.dir / "best" / "kernel.cu").is_file()
    assert SessionInfo.load(s.dir).status == "stopped"
    resumed = open_session(tmp_path, workload, 6)
    assert resumed.run() == "finished"
    assert [a.iteration for a in resumed.state["history"]] == list(range(1, 7))
    resumed.end("finished")
    assert MlflowClient(s.tracker.uri).get_run(s.info.mlflow_run_id).info.status == "FINISHED"


def test_finished_session_continues_with_more_budget(tmp_path, workload):
    """A finished session given a larger budget resumes from where it ended."""
    s = open_session(tmp_path, workload, 2)
    assert s.run() == "finished"
    s.set_budget(4)
    assert s.run() == "finished"
    assert [a.iteration for a in s.state["history"]] == [1, 2, 3, 4]


def test_budget_lowered_below_progress_stops_at_once(tmp_path, workload):
    """A budget lowered below the iterations already done ends the run before another attempt."""
    s = open_session(tmp_path, workload, 10)
    def shrink(e):
        if isinstance(e, events.AttemptFinished) and e.iteration == 3:
            s.control.request("pause")
    assert s.run(shrink) == "paused"
    s.set_budget(1)
    assert s.run() == "finished"
    assert s.state["iteration"] == 3 and s.state["finished"] == "budget"


def test_a_batch_step_makes_several_attempts_and_the_budget_counts_attempts(tmp_path, workload):
    """--batch 3: one proposer call gives up to three attempts, each its own record with its parent; a budget of
    7 ends at exactly 7 attempts even inside a batch; fewer proposer calls than attempts."""
    from warpsmith.agent.proposers.tune import TuneProposer as Tuner

    calls = []

    class CountingTuner(Tuner):  # the real tuner, counting its batch calls
        def propose_batch(self, ctx, n):
            calls.append(n)
            return super().propose_batch(ctx, n)

    s = open_session(tmp_path, workload, 7, batch=3)
    s.proposer = CountingTuner(0, ahead=0)
    seen = []
    assert s.end(s.run(seen.append)) == "finished"
    history = s.state["history"]
    assert len(history) == 7 and s.state["iteration"] == 7 and [a.iteration for a in history] == list(range(1, 8))
    assert calls and all(n == 3 for n in calls) and len(calls) < 7
    assert any(isinstance(e, events.Notice) and e.text.startswith("step of 3 candidates") for e in seen)
    assert all(a.parent is not None for a in history[1:])
    assert len({tuple(sorted(a.defines.items())) for a in history}) == 7
