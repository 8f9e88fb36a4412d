"""`warpsmith ui`: MLflow's own server on a warpsmith store, opened on a workload's
runs (not on MLflow 3's GenAI overview), stopped with its whole process group on
Ctrl-C or SIGTERM. Also MLflow's defaults that warpsmith changes: telemetry is off
unless the user sets MLFLOW_DISABLE_TELEMETRY=false, and every experiment is
marked as model development, the kind whose default view is the runs table."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Experiment

from .store_location import EXPERIMENT_KIND, telemetry_off_by_default, tracking_uri
from .store_schema import StoreUnreadable, open_client

# The UI (MLflow 3.17) picks its GenAI or machine-learning layout from this URL
# parameter (else from the browser's last choice, GenAI at first).
_LAYOUT = "?workflowType=machine_learning"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0


class UiFailed(Exception):
    """The UI cannot be served; the message is one line saying what to do."""


def _experiments(client: MlflowClient) -> list[Experiment]:
    """The store's experiments, MLflow's empty "Default" left out; each marked as
    model development where it carries no kind yet (stores from before the tag)."""
    exps = [e for e in client.search_experiments()
            if e.name != "Default" or client.search_runs([e.experiment_id], max_results=1)]
    for e in exps:
        for key, value in EXPERIMENT_KIND.items():
            if key not in e.tags:
                client.set_experiment_tag(e.experiment_id, key, value)
    return exps


def _workload_name(target: str) -> str:
    """A workload's name, or a workload directory's (its workload.toml says it)."""
    if Path(target).is_dir() or target.endswith(".toml"):
        from ..spec.workload import load_workload
        return load_workload(target).name
    return target


def _page(client: MlflowClient, base: str, target: Optional[str]) -> tuple[Optional[str], str]:
    """(the URL to open, or None; what went wrong otherwise)."""
    exps = _experiments(client)
    if target:
        name = _workload_name(target)
        exps = [e for e in exps if e.name == name]
        if not exps:
            return None, f"no workload named {name} in this store (warpsmith runs lists its sessions)"
    if len(exps) == 1:
        return f"{base}/#/experiments/{exps[0].experiment_id}/runs{_LAYOUT}", ""
    return f"{base}/#/experiments{_LAYOUT}", ""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _port_taken(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (the mlflow CLI and its web and job
    workers), SIGKILL to whatever is left after STOP_TIMEOUT_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, or the group never empties
            if not _group_alive(proc.pid):
                break
            time.sleep(0.1)
        else:
            continue
        break
    proc.wait()


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, frame: Optional[FrameType]) -> None:
    raise _Terminated()


def serve(store: Path, host: str, port: int, target: Optional[str] = None) -> int:
    """Runs until Ctrl-C or SIGTERM; prints one line, the URL to open."""
    telemetry_off_by_default()  # before find_spec("mlflow.server") imports mlflow in this process
    if not (importlib.util.find_spec("flask") and importlib.util.find_spec("mlflow.server")):
        raise UiFailed("the MLflow UI needs the full mlflow package (pip install the warpsmith package again)")
    store = store.resolve()
    if not (store / "mlflow.db").is_file():
        raise UiFailed(f"no MLflow store at {store} (a session writes one: warpsmith run WORKLOAD)")
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{shown}:{port}"
    try:
        url, problem = _page(open_client(tracking_uri(store)), base, target)
    except StoreUnreadable as e:  # written by another mlflow: what to do, in one line
        raise UiFailed(str(e)) from None
    except Exception as e:  # a damaged database, ...
        raise UiFailed(f"cannot read the MLflow store {store}: {str(e).splitlines()[0][:300]}")
    if url is None:
        raise UiFailed(problem)
    if _port_taken(shown, port):
        raise UiFailed(f"port {port} is in use (choose another with --port)")
    env = dict(os.environ)
    telemetry_off_by_default(env)
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")  # GenAI jobs: six idle workers
    log_path = store / "ui.log"
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri(store),
           "--default-artifact-root", (store / "artifacts").as_uri(), "--no-serve-artifacts",
           "--host", host, "--port", str(port), "--workers", "1"]
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    # Ctrl-C stops the server even when this process was started with SIGINT ignored
    # (Python then installs no handler of its own: a parent that ignores it, a script's
    # `trap '' INT`). The README's test run hung here: the test runner's SIGINT was ignored.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)  # its own group: Ctrl-C reaches us, we stop it
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _answers(f"{base}/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                raise UiFailed("the MLflow server did not start" + (f" (exit {proc.returncode})" if
                             proc.returncode is not None else f" in {READY_TIMEOUT_S:g} s")
                             + f"; {log_path}:\n" + "\n".join(tail))
            time.sleep(0.2)
        print(url, flush=True)
        code = proc.wait()
        raise UiFailed(f"the MLflow server exited ({code}); see {log_path}")
    except (KeyboardInterrupt, _Terminated):
        return 0
    finally:
        stop(proc)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
