"""The Ray backend on a real GPU: a short tune session with one GPU actor."""

from __future__ import annotations

import importlib.util

import pytest
from workload_factory import make_sgemm_workload

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (warpsmith[ray])")]


def test_a_tune_session_on_ray_with_one_gpu_actor_finds_a_validated_best(tmp_path):
    """`run --backend ray --ray-gpus 1` on sgemm: a best that passed validation, each attempt naming the actor's GPU."""
    from mlflow.tracking import MlflowClient

    from agent.cli.commands import main
    from agent.evaluate.results import Status
    from agent.loop.session import stored_session
    store = tmp_path / "store"
    w = make_sgemm_workload(tmp_path / "w")
    assert main(["run", str(w), "--proposer", "tune", "--kernel", "tiled", "--budget", "3", "--headless",
                 "--store", str(store), "--backend", "ray", "--ray-gpus", "1"]) == 0
    (session,) = [p.name for p in (store / "sessions").iterdir()]
    info, state = stored_session(store, session)
    best = state["best"]
    assert best is not None and all(c.status == Status.OK for c in best.cases)
    facts = state["facts"]
    ran = [a for a in state["history"] if a.status == Status.OK]
    assert ran and all(a.gpu.startswith(f"actor 0: {facts['name']}") for a in ran)
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}") if (store / "mlflow.db").is_file() else None
    if client is not None:
        run = client.get_run(info.mlflow_run_id)
        children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        assert {c.data.tags.get("warpsmith.gpu", "")[:8] for c in children if c.info.status == "FINISHED"} == {"actor 0:"}
