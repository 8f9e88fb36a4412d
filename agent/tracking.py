"""MLflow tracking: one experiment per workload, one run per session.

The default store is ``mlruns/`` in the working directory: a SQLite database
(``mlflow.db``) and an ``artifacts/`` folder, browsable with
``mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db``. Logging never stops
the loop: a tracking failure becomes one warning line. Nothing secret is logged:
the API key is never a parameter, tag or artifact.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

from .loop_state import Attempt, Best, CandidateSpec



def _quiet() -> None:
    # mlflow configures its loggers when imported, so this runs after the import.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def default_store() -> Path:
    return Path.cwd() / "mlruns"


def tracking_uri(store: Path) -> str:
    return f"sqlite:///{store.resolve() / 'mlflow.db'}"


class Tracker:
    def __init__(self, store: Path, uri: Optional[str] = None):
        from mlflow.tracking import MlflowClient
        _quiet()
        self.store = Path(store)
        self.store.mkdir(parents=True, exist_ok=True)
        self.uri = uri or tracking_uri(self.store)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.run_id: Optional[str] = None
        self.warnings = 0

    def _safe(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # tracking must never take the session down
            self.warnings += 1
            print(f"warpsmith: warning: MLflow {what} failed: {type(e).__name__}: {e}", file=sys.stderr)
            return None

    # -- session lifecycle --------------------------------------------------
    def start(self, workload: str, session_id: str, params: dict) -> Optional[str]:
        def go():
            exp = self.client.get_experiment_by_name(workload)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(
                workload, artifact_location=(self.store / "artifacts" / workload).resolve().as_uri())
            run = self.client.create_run(exp_id, run_name=session_id, tags={"warpsmith.session": session_id,
                                                                             "warpsmith.workload": workload})
            self.run_id = run.info.run_id
            for k, v in params.items():
                self.client.log_param(self.run_id, k, str(v)[:6000])
            return self.run_id
        return self._safe("start", go)

    def reopen(self, run_id: str) -> None:
        self.run_id = run_id
        self._safe("reopen", self.client.update_run, run_id, "RUNNING")

    def end_session(self, session_status: str) -> None:
        """A session's end (finished, failed, stopped, paused) as the MLflow run's status."""
        self.end({"finished": "FINISHED", "failed": "FAILED"}.get(session_status, "KILLED"))

    def end(self, status: str) -> None:
        """status: FINISHED, KILLED or FAILED."""
        if self.run_id:
            self._safe("end", self.client.set_terminated, self.run_id, status)

    # -- what the graph reports ----------------------------------------------
    def log_plan(self, facts: dict, baseline: dict, baseline_score: Optional[float], start: Optional[Best], result) -> None:
        if not self.run_id:
            return
        run = self.run_id
        self._safe("log_plan", self.client.log_dict, run, facts, "gpu.json")
        for key, name in (("gpu", "name"), ("gpu_uuid", "uuid"), ("arch", "arch"), ("driver_cuda", "driver"),
                          ("nvrtc", "nvrtc")):
            if facts.get(name):
                self._safe("log_plan", self.client.log_param, run, key, str(facts[name]))
        if baseline_score:
            self._safe("log_plan", self.client.log_metric, run, "baseline_score_ms", baseline_score, step=0)
        if start:
            self._safe("log_plan", self.client.log_metric, run, "start_score_ms", start.score_ms, step=0)
            self._safe("log_plan", self.client.log_metric, run, "best_score_ms", start.score_ms, step=0)
        self._safe("log_plan", self.client.log_text, run, result.detail or "ok", "start/validation.txt")

    def log_attempt(self, attempt: Attempt, spec: Optional[CandidateSpec], best: Optional[Best],
                    baseline_score: Optional[float]) -> None:
        if not self.run_id:
            return
        run, step = self.run_id, attempt.iteration
        folder = f"attempts/{step:03d}"
        metrics = {"ok": 1.0 if attempt.status == "ok" else 0.0, "tokens": float(attempt.tokens)}
        if attempt.score_ms:
            metrics["score_ms"] = attempt.score_ms
        if best:
            metrics["best_score_ms"] = best.score_ms
            if baseline_score:
                metrics["best_speedup_vs_baseline"] = baseline_score / best.score_ms
        for c in attempt.cases:
            if c.median_ms:
                metrics[f"median_ms.{c.case}"] = c.median_ms
            if c.pct_of_floor:
                metrics[f"pct_of_floor.{c.case}"] = 100.0 * c.pct_of_floor
        if attempt.score_ms:
            metrics["suspect"] = 1.0 if attempt.suspect else 0.0
        for p in attempt.profile:
            for key in ("sm_throughput_pct", "memory_throughput_pct", "achieved_occupancy_pct", "l2_hit_pct"):
                metrics[f"ncu.{key}.{p.case}"] = p.metrics.get(key, 0.0)
        from mlflow.entities import Metric
        import time
        now = int(time.time() * 1000)
        self._safe("log_attempt", self.client.log_batch, run,
                   metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])
        if spec is not None:
            self._safe("log_attempt", self.client.log_text, run, spec.source, f"{folder}/kernel.cu")
            self._safe("log_attempt", self.client.log_dict, run, spec.model_dump(exclude={"source"}), f"{folder}/candidate.json")
        summary = {"status": attempt.status, "score_ms": attempt.score_ms, "new_best": attempt.new_best,
                   "suspect": attempt.suspect, "sources": attempt.sources,
                   "cases": [c.model_dump() for c in attempt.cases]}
        if attempt.profile:
            self._safe("log_attempt", self.client.log_dict, run, [p.model_dump() for p in attempt.profile],
                       f"{folder}/profile.json")
        self._safe("log_attempt", self.client.log_dict, run, summary, f"{folder}/result.json")
        if attempt.detail:
            self._safe("log_attempt", self.client.log_text, run, attempt.detail, f"{folder}/detail.txt")

    def log_budget(self, budget: int) -> None:
        if self.run_id:
            self._safe("log_budget", self.client.set_tag, self.run_id, "warpsmith.budget", str(budget))

    def log_best(self, files: dict[str, str]) -> None:
        if self.run_id:
            for name, text in files.items():
                self._safe("log_best", self.client.log_text, self.run_id, text, f"best/{name}")


class NullTracker:
    """Tracking switched off (--no-tracking): every call does nothing."""

    run_id = None
    warnings = 0

    def __getattr__(self, name):
        return lambda *args, **kwargs: None
