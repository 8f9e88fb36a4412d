"""The run history: one parent run per session, one child run per attempt (params,
metrics, kernel artifacts) readable with MlflowClient; `warpsmith diff`; a tracking
store that breaks mid-session is a warning, not a crash. An EvaluatorDouble stands
in for the GPU."""

from __future__ import annotations

import shutil

from mlflow.tracking import MlflowClient
from test_loop import open_session, workload  # noqa: F401  (fixture)

from warpsmith.agent.cli.commands import main
from warpsmith.agent.tracking.tracker import attempt_runs, session_runs


def test_child_run_per_attempt_with_params_metrics_and_kernel(tmp_path, workload):
    s = open_session(tmp_path, workload, 4)
    s.run()
    client = MlflowClient(s.tracker.uri)
    assert [r.info.run_id for r in session_runs(client)] == [s.info.mlflow_run_id]
    children = attempt_runs(client, s.info.mlflow_run_id)
    assert [r.data.tags["warpsmith.iteration"] for r in children] == ["1", "2", "3", "4"]
    paged = attempt_runs(client, s.info.mlflow_run_id, page_size=3)  # more attempts than a page
    assert [r.info.run_id for r in paged] == [r.info.run_id for r in children]
    first, history = children[0], s.state["history"]
    assert first.data.params["knob.BM"] == str(history[0].defines["BM"]) and first.data.params["grid"]
    assert first.data.metrics["score_ms"] == history[0].score_ms and first.data.metrics["median_ms.square-256"] > 0
    assert first.info.status == "FINISHED"
    names = {f.path for f in client.list_artifacts(first.info.run_id)}
    assert {"kernel.cu", "candidate.json", "result.json"} <= names
    kernel = client.download_artifacts(first.info.run_id, "kernel.cu", str(tmp_path))
    assert open(kernel).read() == (s.dir / "attempts" / "001" / "kernel.cu").read_text()


def test_runs_lists_a_sessions_child_runs(tmp_path, workload, capsys):
    s = open_session(tmp_path, workload, 3)
    s.end(s.run())
    assert main(["runs", "--store", str(tmp_path / "store"), "--attempts", "s1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"session s1: parent run {s.info.mlflow_run_id} (FINISHED), 3 child runs"
    rows = [line.split() for line in out[2:]]
    assert [r[0] for r in rows] == ["1", "2", "3"] and all(r[2] == "FINISHED" for r in rows)
    first = s.state["history"][0]
    assert float(rows[0][3]) == round(first.score_ms, 4) and f"BM={first.defines['BM']}" in out[2]
    assert main(["runs", "--store", str(tmp_path / "store"), "--attempts", "nope"]) == 2
    assert "no MLflow run for session nope" in capsys.readouterr().err


def test_run_with_cases_times_and_scores_only_those(tmp_path, workload, capsys):
    """An unknown name is one line and creates nothing; a known one is kept by the
    session, so every attempt is validated on all cases and timed on that one."""
    from warpsmith.agent.loop.session import SessionInfo
    store = tmp_path / "store"
    assert main(["run", str(workload.directory), "--cases", "nope", "--store", str(store)]) == 2
    assert "--cases: nope is not a performance case of sgemm" in capsys.readouterr().err and not store.exists()
    focus = [c.name for c in workload.cases if c.timed][-1]
    s = open_session(tmp_path, workload.timing_only([focus]), 2)
    s.run()
    for a in s.state["history"]:
        assert a.status == "ok" and len(a.cases) == len(workload.cases)
        assert [c.case for c in a.cases if c.median_ms] == [focus]
    # Resuming reopens the workload from session.json: the focus must survive that.
    from warpsmith.agent.cli.sessions import resume_session
    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.loop.options import SearchOptions
    from warpsmith.agent.loop.session import session_dir
    from warpsmith.agent.tracking.options import TrackingOptions
    session_dir(store, "s2").mkdir(parents=True)
    SessionInfo("s2", str(workload.directory), SearchOptions(budget=2, cases=(focus,))).save(session_dir(store, "s2"))
    resumed = resume_session("s2", EvaluationOptions(), TrackingOptions(store, enabled=False))
    try:
        assert [c.name for c in resumed.evaluator.workload.cases if c.timed] == [focus]
        assert len(resumed.evaluator.workload.cases) == len(workload.cases)
    finally:
        resumed.close()


def test_flush_gives_up_on_a_store_that_hangs(tmp_path, capsys):
    """A remote store that stopped answering holds the session's end at most the timeout."""
    import threading

    from warpsmith.agent.tracking.tracker import Tracker
    t, release = Tracker(tmp_path / "store"), threading.Event()
    t._later("log_attempt", release.wait)
    t.flush(timeout_s=0.2)
    assert "MLflow logging still pending after 0.2 s; 1 records may be missing" in capsys.readouterr().err
    t.flush(timeout_s=30)  # stalled: returns at once, no second warning
    assert t.warnings == 1 and capsys.readouterr().err == ""
    release.set()


def test_diff_of_first_and_best(tmp_path, workload, capsys):
    s = open_session(tmp_path, workload, 5)
    s.run()
    best = s.state["best"].iteration
    assert main(["diff", "s1", "1", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#1 ") and f"#{best} " in out
    assert "--- attempt-001/kernel.cu" in out and "square-256" in out
    assert "-#define BK 8  // -DBK=8" in out and "+#define BK 16  // -DBK=16" in out
    assert main(["diff", "s1", "9", "--store", str(tmp_path / "store")]) == 2
    assert "no attempt 9 in s1" in capsys.readouterr().err


def test_tracking_store_broken_mid_session_is_a_warning(tmp_path, workload, capsys):
    s = open_session(tmp_path, workload, 4)
    s.control.set_budget(2)
    s.run()
    shutil.rmtree(tmp_path / "store" / "artifacts")  # the artifact store goes away ...
    (tmp_path / "store" / "artifacts").write_text("not a folder")  # ... and cannot come back
    s.control.set_budget(4)
    s.set_budget(4)
    assert s.end(s.run()) == "finished" and s.state["iteration"] == 4
    assert "warpsmith: warning: MLflow log_attempt failed" in capsys.readouterr().err
    assert (s.dir / "best" / "kernel.cu").is_file()


def test_each_child_run_names_its_parent_attempt_and_diff_compares_them(tmp_path, workload, capsys):
    """A tree of attempts: every child run carries the attempt it came from (tag and param), and
    `diff SESSION N --parent` shows that parent against N."""
    s = open_session(tmp_path, workload, 4)
    s.run()
    history = s.state["history"]
    client = MlflowClient(s.tracker.uri)
    tags = {r.data.tags["warpsmith.iteration"]: r.data.tags.get("warpsmith.parent_attempt")
            for r in attempt_runs(client, s.info.mlflow_run_id)}
    assert tags == {str(a.iteration): (str(a.parent) if a.parent is not None else None) for a in history}
    child = next(a for a in history if a.parent)
    assert main(["diff", "s1", str(child.iteration), "--parent", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert f"--- attempt-{child.parent:03d}/kernel.cu" in out and f"+++ attempt-{child.iteration:03d}/kernel.cu" in out
    assert main(["diff", "s1", "1", "--parent", "--store", str(tmp_path / "store")]) == 2
    assert "has no parent attempt recorded" in capsys.readouterr().err
