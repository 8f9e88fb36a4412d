"""A tracking store this mlflow cannot open (written by a newer one, or an older one
not migrated) is one line saying what to do for `runs`, `run`, `resume` and `ui`, and
nothing is created. The stores are real: written by the real tracker in a child
process (this process keeps no opened store of theirs), their alembic revision then
changed with SQL."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import mlflow
import pytest
from package_env import child_env
from workload_factory import make_sgemm_workload

from warpsmith.agent.cli.commands import main
from warpsmith.agent.tracking.store_schema import known_revisions

WRITE_STORE = ("import sys; from pathlib import Path; from warpsmith.agent.tracking.tracker import Tracker; "
               "t = Tracker(Path(sys.argv[1])); t.start('sgemm', 'sgemm-s1', {'proposer': 'tune'}); t.end('FINISHED')")


def _store_at_revision(store, revision: str):
    subprocess.run([sys.executable, "-P", "-c", WRITE_STORE, str(store)], env=child_env(), check=True, timeout=120)
    with sqlite3.connect(store / "mlflow.db") as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    return store


@pytest.fixture
def newer_store(tmp_path):
    return _store_at_revision(tmp_path / "store", "ffffffffffff")


def test_runs_run_resume_and_ui_say_the_store_is_from_a_newer_mlflow(newer_store, tmp_path, capsys):
    """Each command exits 2 with the same one line; run and resume leave no session behind."""
    line = (f"warpsmith: error: the MLflow store {newer_store.resolve() / 'mlflow.db'} was written by a newer mlflow "
            f"than the installed {mlflow.__version__} (schema ffffffffffff is unknown to it): use a new --store DIR, "
            "or install the mlflow that wrote it\n")
    workload = str(make_sgemm_workload(tmp_path / "w"))
    for argv in (["runs"], ["run", workload, "--proposer", "tune", "--headless"], ["resume", "sgemm-s1"], ["ui"]):
        assert main([*argv, "--store", str(newer_store)]) == 2, argv
        out = capsys.readouterr()
        assert out.err == line and out.out == "", argv
    assert not (newer_store / "sessions").exists()


def test_runs_prints_one_line_in_a_fresh_process(newer_store):
    """The whole command, as a user runs it: one line on stderr, no traceback, no mlflow log."""
    done = subprocess.run([sys.executable, "-P", "-m", "warpsmith.tui", "runs", "--store", str(newer_store)],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()] and "written by a newer mlflow" in done.stderr


def test_a_store_from_an_older_mlflow_says_to_upgrade_it(tmp_path, capsys):
    """A known, older revision: back it up and `mlflow db upgrade`, in one line."""
    older = next(r for r in sorted(known_revisions()))
    store = _store_at_revision(tmp_path / "store", older)
    assert main(["runs", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"written by an older mlflow (schema {older})" in err
    assert f"mlflow db upgrade sqlite:///{store.resolve() / 'mlflow.db'}" in err


def test_a_tracked_run_without_mlflow_installed_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """An install that lacks MLflow: `run` says so and how to go on (--no-tracking) before any GPU work."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    store = tmp_path / "store"
    assert main(["run", str(make_sgemm_workload(tmp_path / "w")), "--proposer", "tune", "--headless",
                 "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err == ("warpsmith: error: MLflow is not installed, so the session cannot be tracked: `pip install mlflow`, "
                   "or run with --no-tracking\n")
    assert not store.exists()
