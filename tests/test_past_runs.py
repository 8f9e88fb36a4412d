"""Past sessions as typed rows, read back from a real MLflow store the real tracker
wrote (an EvaluatorDouble stands in for the GPU); `warpsmith runs` and the app's
past-runs screen list the same rows."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from mlflow.tracking import MlflowClient
from test_loop import open_session, workload  # noqa: F401  (fixture)

from warpsmith.agent.cli.commands import main
from warpsmith.agent.tracking.past_runs import PastAttempt, PastRun, RunsSource, past_attempts, past_runs


def test_sessions_newest_first_with_best_speedup_and_status(tmp_path, workload):
    """Two sessions: rows carry the session, workload, proposer, best, speed-up over the baseline and MLflow status."""
    first = open_session(tmp_path, workload, 2, session_id="first")
    first.tracker.end_session(first.run())
    second = open_session(tmp_path, workload, 1, session_id="second")
    second.run()
    second.tracker.end_session("stopped")
    client = MlflowClient(first.tracker.uri)
    rows = past_runs(client)
    assert [r.session for r in rows] == ["second", "first"] and rows[0].started >= rows[1].started
    assert all(isinstance(r, PastRun) for r in rows)
    older = rows[1]
    best, baseline = first.state["best"].score_ms, first.state["baseline_score_ms"]
    assert (older.run_id, older.workload, older.proposer, older.status) == (
        first.info.mlflow_run_id, workload.name, "tune", "FINISHED")
    assert older.best_ms == pytest.approx(best) and older.speedup == pytest.approx(baseline / best)
    assert rows[0].status == "KILLED"
    assert past_runs(client, workload.name) == rows and past_runs(client, "another-workload") == []
    with pytest.raises(dataclasses.FrozenInstanceError):  # a row is read, never edited
        older.status = "RUNNING"


def test_attempts_in_iteration_order_with_knobs_and_scores(tmp_path, workload):
    """A session's child runs as attempts: iteration, status, score and knob values as the session recorded them."""
    s = open_session(tmp_path, workload, 3)
    s.tracker.end_session(s.run())
    client = MlflowClient(s.tracker.uri)
    attempts = past_attempts(client, past_runs(client)[0])
    history = s.state["history"]
    assert all(isinstance(a, PastAttempt) for a in attempts)
    assert [a.iteration for a in attempts] == [a.iteration for a in history] == [1, 2, 3]
    assert [a.score_ms for a in attempts] == pytest.approx([a.score_ms for a in history])
    assert all(a.status == "FINISHED" for a in attempts)
    assert dict(attempts[0].knobs) == {k: str(v) for k, v in history[0].defines.items()}


def test_runs_command_and_past_runs_screen_list_the_same_rows(tmp_path, workload, capsys):
    """`warpsmith runs` prints a line per past_runs row, and the screen's source returns those rows."""
    for name in ("a", "b"):
        s = open_session(tmp_path, workload, 1, session_id=name)
        s.tracker.end_session(s.run())
    rows = past_runs(MlflowClient(s.tracker.uri))
    assert RunsSource(s.tracker).runs() == rows
    assert main(["runs", "--store", str(tmp_path / "store")]) == 0
    printed = capsys.readouterr().out.splitlines()[1:]
    assert [line.split() for line in printed] == [
        [*datetime.datetime.fromtimestamp(r.started).strftime("%Y-%m-%d %H:%M").split(), r.session, r.proposer,
         f"{r.best_ms:.4f}", f"{r.speedup:.2f}x", r.status] for r in rows]
