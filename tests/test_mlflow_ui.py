"""`warpsmith ui` in a real browser: a session written by warpsmith's tracking (an
EvaluatorDouble stands in for the GPU), the UI started as the user starts it, its
one printed URL rendered by headless Chromium (the system's), the session and its
attempts found on the page; then Ctrl-C stops the server and every process it spawned."""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_loop import open_session, workload  # noqa: F401  (fixture)

from warpsmith.agent.tracking.mlflow_ui import EXPERIMENT_KIND, STOP_TIMEOUT_S

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_line(proc: subprocess.Popen, timeout_s: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout_s):
        proc.kill()
        pytest.fail(f"warpsmith ui printed nothing in {timeout_s:g} s")
    return proc.stdout.readline().strip()


def _render(url: str, profile: Path, expect: list[str], tries: int = 3) -> str:
    """The page's DOM once the app has rendered it: Chromium's virtual time runs the
    app until its fetches settle; a slow machine gets another try, never a sleep."""
    for _ in range(tries):
        dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              f"--user-data-dir={profile}", "--virtual-time-budget=15000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
        if all(e in dom for e in expect):
            break
    return dom


def _mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().decode(errors="replace").replace("\0", " ")
        except OSError:  # gone meanwhile
            continue
        if text in line:
            found.append(line)
    return found


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _stuck(pid: int, log: Path) -> str:
    """What a process that did not stop is waiting in (its and its children's kernel wait
    channels) and the server log's tail: enough to tell a hang from a slow exit."""
    waits = []
    for p in [pid, *_children(pid)]:
        try:
            waits.append(f"{p} {Path(f'/proc/{p}/cmdline').read_bytes()[:80]!r} waits in {Path(f'/proc/{p}/wchan').read_text()}")
        except OSError:
            waits.append(f"{p} gone")
    tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
    return "; ".join(waits) + " | ui.log: " + " / ".join(tail)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
def test_ui_shows_the_session_and_its_attempts_then_stops_on_ctrl_c(tmp_path, workload):
    s = open_session(tmp_path, workload, 2, session_id="sgemm-uitest-7f3a")
    s.end(s.run())
    store, port = tmp_path / "store", _free_port()
    client = MlflowClient(s.tracker.uri)
    exp = client.get_experiment(s.tracker.experiment_id)
    assert exp.tags.items() >= EXPERIMENT_KIND.items()  # opens on runs, not on GenAI traces
    attempts = sorted(r.info.run_name for r in client.search_runs([exp.experiment_id])
                      if r.data.tags.get("mlflow.parentRunId") == s.info.mlflow_run_id)
    assert len(attempts) == 2

    # The warpsmith under test (installed, or PYTHONPATH's), started away from the source tree.
    path = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    # Started with SIGINT ignored, as a parent that ignores it leaves a child: Ctrl-C must still stop it.
    proc = subprocess.Popen([sys.executable, "-m", "warpsmith.tui", "ui", "--store", str(store), "--port", str(port)],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        url = _first_line(proc, 180)  # printed once the server answers
        base = f"http://127.0.0.1:{port}"
        assert url == f"{base}/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
        (server,) = _children(proc.pid)

        runs_page = _render(url, tmp_path / "chrome", ["sgemm-uitest-7f3a"])
        assert "sgemm-uitest-7f3a" in runs_page
        # The session's own page (a click on its name) lists the attempts, its child runs.
        session_page = _render(url.replace("/runs?", f"/runs/{s.info.mlflow_run_id}?"), tmp_path / "chrome", attempts)
        assert all(a in session_page for a in attempts), attempts

        proc.send_signal(signal.SIGINT)
        # stop() gives the server STOP_TIMEOUT_S after SIGTERM and again after SIGKILL; a
        # loaded 2-core machine gets a minute more before this counts as a hang.
        try:
            code = proc.wait(timeout=2 * STOP_TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            pytest.fail("warpsmith ui did not stop on Ctrl-C: " + _stuck(proc.pid, store / "ui.log"))
        assert code == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stdout.read() == "" and proc.stderr.read() == ""  # the URL was the one line
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the server's port is still open"
    with pytest.raises(ProcessLookupError):
        os.killpg(server, 0)  # nothing left of the server's process group: its workers included
    assert not _mentioning(str(store)), "an mlflow process outlived warpsmith ui"


def test_ui_on_a_missing_store_is_one_line(tmp_path, capsys):
    from warpsmith.agent.cli.commands import main
    assert main(["ui", "--store", str(tmp_path / "nowhere")]) == 2
    assert re.fullmatch(r"warpsmith: error: no MLflow store at .*nowhere \(a session writes one: "
                        r"warpsmith run WORKLOAD\)\n", capsys.readouterr().err)


def test_ui_names_an_unknown_workload(tmp_path, workload, capsys):
    from warpsmith.agent.cli.commands import main
    open_session(tmp_path, workload, 1).run()
    assert main(["ui", "nope", "--store", str(tmp_path / "store"), "--port", str(_free_port())]) == 2
    assert capsys.readouterr().err == ("warpsmith: error: no workload named nope in this store "
                                       "(warpsmith runs lists its sessions)\n")
