"""The Ray backend on a real GPU: a short tune session with one GPU actor.

Two tests, so the MLflow check can skip on its own: the GPU call of the Ray backend
carries Ray's wheels in place of MLflow's (benchmarks/ray_wheels.sh, a 64 MiB transfer),
and the session itself needs no tracking."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from workload_factory import make_sgemm_workload

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (warpsmith[ray])")]


def _ray_session(tmp_path: Path, *tracking: str):
    from warpsmith.agent.cli.commands import main
    from warpsmith.agent.loop.session import stored_session
    store = tmp_path / "store"
    w = make_sgemm_workload(tmp_path / "w")
    assert main(["run", str(w), "--proposer", "tune", "--kernel", "tiled", "--budget", "3", "--headless",
                 "--store", str(store), "--backend", "ray", "--ray-gpus", "1", *tracking]) == 0
    (session,) = [p.name for p in (store / "sessions").iterdir()]
    return store, *stored_session(store, session)


def test_a_tune_session_on_ray_with_one_gpu_actor_finds_a_validated_best(tmp_path):
    """`run --backend ray --ray-gpus 1` on sgemm: a best that passed validation, each attempt naming the actor's GPU."""
    from warpsmith.agent.evaluate.results import Status
    _, _, state = _ray_session(tmp_path, "--no-tracking")
    best = state["best"]
    assert best is not None and all(c.status == Status.OK for c in best.cases)
    # A 3-attempt session may time none in full: every attempt the GPU ran counts.
    ran = [a for a in state["history"] if a.status in (Status.OK, Status.REJECTED_EARLY)]
    assert ran and all(a.gpu.startswith(f"actor 0: {state['facts']['name']}") for a in ran)


def test_each_mlflow_attempt_run_of_a_ray_session_names_the_actor(tmp_path):
    """The same session tracked: every finished child run carries the actor's GPU tag."""
    pytest.importorskip("mlflow", reason="MLflow is not installed (the Ray GPU call carries Ray in its place)")
    from mlflow.tracking import MlflowClient
    store, info, _ = _ray_session(tmp_path)
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    run = client.get_run(info.mlflow_run_id)
    children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    finished = [c for c in children if c.info.status == "FINISHED"]
    assert finished and {c.data.tags.get("warpsmith.gpu", "")[:8] for c in finished} == {"actor 0:"}
