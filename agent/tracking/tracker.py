"""MLflow tracking: one experiment per workload, one parent run per session and a
nested child run per attempt (its knobs, launch and compile options as params,
per-case medians and status as metrics, kernel.cu / validation report / profile
as artifacts), so MLflow's compare view puts attempts side by side. The parent
keeps the best-so-far series and the best kernel.

Logging never slows the loop: calls go to one background thread in order, and
`flush()` waits for them (at the end of a run, before anything reads them back).

The default store is ``mlruns/`` in the working directory: a SQLite database
(``mlflow.db``) and an ``artifacts/`` folder, browsable with
``warpsmith ui`` (agent/tracking/mlflow_ui.py). Logging never stops
the loop: a tracking failure becomes one warning line. Nothing secret is logged:
the API key is never a parameter, tag or artifact.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from ..evaluate.records import Attempt, Best, CandidateSpec
from ..evaluate.results import EvaluationResult, Status
from ..evaluate.session_result import SessionResult
from ..runtime.device_facts import DeviceFacts
from .session_tracker import SessionTracker
from .store_location import EXPERIMENT_KIND, default_store, tracking_uri
from .store_schema import open_client

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

T = TypeVar("T")  # what a logging call returns

__all__ = ["Tracker", "default_store", "tracking_uri"]


class Tracker(SessionTracker):
    def __init__(self, store: Path, uri: Optional[str] = None):
        self.store = Path(store)
        self.store.mkdir(parents=True, exist_ok=True)
        self.uri = uri or tracking_uri(self.store)
        self.client = open_client(self.uri)  # raises StoreUnreadable: a store from another mlflow
        self.run_id: Optional[str] = None
        self.experiment_id: Optional[str] = None
        self.warnings = 0
        self._queue: queue.Queue[tuple[str, Callable[..., object], tuple[Any, ...], dict[str, Any]]] = queue.Queue()
        self._stalled = False  # a flush timed out: the store stopped answering
        threading.Thread(target=self._drain, daemon=True, name="mlflow-logging").start()

    def _drain(self) -> None:
        while True:
            what, fn, args, kwargs = self._queue.get()
            try:
                self._safe(what, fn, *args, **kwargs)
            finally:
                self._queue.task_done()

    def _later(self, what: str, fn: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """Log in the background, in order; a failure is one warning line."""
        self._queue.put((what, fn, args, kwargs))

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait for the queued logging, at most timeout_s: a remote store that went
        down must not hold the session's end (what is left is one warning). Once a
        flush has timed out the store counts as stalled: later flushes return at once."""
        if self._stalled:
            return
        done = threading.Event()
        def wait() -> None:
            self._queue.join()
            done.set()
        threading.Thread(target=wait, daemon=True).start()
        if not done.wait(timeout_s):
            self._stalled = True
            self.warnings += 1
            print(f"warpsmith: warning: MLflow logging still pending after {timeout_s:g} s; "
                  f"{self._queue.unfinished_tasks} records may be missing from the run", file=sys.stderr)

    def _safe(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Optional[T]:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # tracking must never take the session down
            self.warnings += 1
            print(f"warpsmith: warning: MLflow {what} failed: {type(e).__name__}: {e}", file=sys.stderr)
            return None

    # -- session lifecycle --------------------------------------------------
    def experiment(self, workload: str) -> str:
        """The workload's experiment id, created with its artifacts in this store (MLflow's
        own default would be ./mlruns under whatever folder the process started in)."""
        exp = self.client.get_experiment_by_name(workload)
        return str(exp.experiment_id) if exp else self.client.create_experiment(
            workload, artifact_location=(self.store / "artifacts" / workload).resolve().as_uri(), tags=EXPERIMENT_KIND)

    def start(self, workload: str, session_id: str, params: dict[str, Any]) -> Optional[str]:
        def go() -> str:
            exp_id = self.experiment(workload)
            run = self.client.create_run(exp_id, run_name=session_id, tags={"warpsmith.session": session_id,
                                                                             "warpsmith.workload": workload})
            self.run_id, self.experiment_id = run.info.run_id, exp_id
            for k, v in params.items():
                self.client.log_param(self.run_id, k, str(v)[:6000])
            return self.run_id
        return self._safe("start", go)

    def reopen(self, run_id: str) -> None:
        self.run_id = run_id
        run = self._safe("reopen", self.client.get_run, run_id)
        self.experiment_id = run.info.experiment_id if run else None
        self._safe("reopen", self.client.update_run, run_id, "RUNNING")

    def end_session(self, session_status: str) -> None:
        """A session's end (finished, failed, stopped, paused) as the MLflow run's status."""
        self.end({"finished": "FINISHED", "failed": "FAILED"}.get(session_status, "KILLED"))

    def end(self, status: str) -> None:
        """status: FINISHED, KILLED or FAILED."""
        self.flush()
        if self.run_id and self._stalled:  # behind the stuck records, not blocking the exit
            self._later("end", self.client.set_terminated, self.run_id, status)
        elif self.run_id:
            self._safe("end", self.client.set_terminated, self.run_id, status)

    # -- what the graph reports ----------------------------------------------
    def log_plan(self, facts: DeviceFacts, baseline: dict[str, float], baseline_score: Optional[float],
                 start: Optional[Best], result: Optional[EvaluationResult]) -> None:
        """`result`: the starting kernel's evaluation; None for a workload that starts from scratch."""
        if self.run_id:
            validation = "no starting kernel (from scratch)" if result is None else result.detail or "ok"
            self._later("log_plan", self._write_plan, self.run_id, facts.to_dict(), baseline_score,
                        start.score_ms if start else None, validation)

    def _write_plan(self, run: str, facts: dict[str, Any], baseline_score: Optional[float], start_score: Optional[float],
                    validation: str) -> None:
        from mlflow.entities import Metric, Param
        now = int(time.time() * 1000)
        self.client.log_dict(run, facts, "gpu.json")
        params = [Param(key, str(facts[name])) for key, name in (("gpu", "name"), ("gpu_uuid", "uuid"), ("arch", "arch"),
                                                                 ("driver_cuda", "driver"), ("nvrtc", "nvrtc"))
                  if facts.get(name)]
        metrics = [Metric(k, v, now, 0) for k, v in (("baseline_score_ms", baseline_score), ("start_score_ms", start_score),
                                                     ("best_score_ms", start_score)) if v]
        self.client.log_batch(run, metrics=metrics, params=params)
        self.client.log_text(run, validation, "start/validation.txt")

    def log_attempt(self, attempt: Attempt, spec: Optional[CandidateSpec], best: Optional[Best],
                    baseline_score: Optional[float]) -> None:
        """The parent run's series (score, best so far, per case) and one child run for the attempt."""
        if not self.run_id:
            return
        case_metrics = {}
        for c in attempt.cases:
            if c.median_ms:
                case_metrics[f"median_ms.{c.case}"] = c.median_ms
            if c.pct_of_floor:
                case_metrics[f"pct_of_floor.{c.case}"] = 100.0 * c.pct_of_floor
        for p in attempt.profile:
            for key in ("sm_throughput_pct", "memory_throughput_pct", "achieved_occupancy_pct", "l2_hit_pct"):
                case_metrics[f"ncu.{key}.{p.case}"] = p.metrics.get(key, 0.0)
        own = {"ok": 1.0 if attempt.status == Status.OK else 0.0, "tokens": float(attempt.tokens),
               "cost_usd": attempt.cost_usd, **case_metrics,
               **({"rejected_early": 1.0} if attempt.status == Status.REJECTED_EARLY else {})}
        if attempt.score_ms:
            own["score_ms"] = attempt.score_ms
            own["suspect"] = 1.0 if attempt.suspect else 0.0
        series = dict(own)
        if best:
            series["best_score_ms"] = best.score_ms
            if baseline_score:
                series["best_speedup_vs_baseline"] = baseline_score / best.score_ms
        files = {"result.json": json.dumps({"status": attempt.status, "score_ms": attempt.score_ms,
                                            "new_best": attempt.new_best, "suspect": attempt.suspect,
                                            "sources": attempt.sources,
                                            "cases": [c.model_dump() for c in attempt.cases]}, indent=2)}
        if spec is not None:
            files["kernel.cu"] = spec.source
            files["candidate.json"] = spec.model_dump_json(exclude={"source"}, indent=2)
        if attempt.detail:
            files["detail.txt"] = attempt.detail
        if attempt.profile:
            files["profile.json"] = json.dumps([p.model_dump() for p in attempt.profile], indent=2)
        params = {"iteration": attempt.iteration, "name": attempt.name, "proposer": attempt.proposer,
                  "status": attempt.status, **({"parent": attempt.parent} if attempt.parent is not None else {}),
                  **({"gpu": attempt.gpu} if attempt.gpu else {})}
        if spec is not None:
            params.update({"grid": " ".join(spec.grid), "block": " ".join(spec.block), "shared": spec.shared,
                           "entry": spec.entry, "compile_options": " ".join(spec.options) or "-",
                           **{f"knob.{k}": v for k, v in attempt.defines.items()}})
        self._later("log_attempt", self._write_attempt, self.run_id, attempt.iteration, series, own, params, files)

    def _write_attempt(self, run: str, step: int, series: dict[str, float], own: dict[str, float], params: dict[str, Any],
                       files: dict[str, str]) -> None:
        from mlflow.entities import Metric, Param, RunTag
        now = int(time.time() * 1000)
        self.client.log_batch(run, metrics=[Metric(k, float(v), now, step) for k, v in series.items()])
        for name, text in files.items():  # the parent keeps every attempt's files too
            self.client.log_text(run, text, f"attempts/{step:03d}/{name}")
        if self.experiment_id is None:
            return
        child = self.client.create_run(self.experiment_id, run_name=f"attempt-{step:03d} {params['name']}"[:250],
                                       tags={"mlflow.parentRunId": run, "warpsmith.iteration": str(step),
                                             "warpsmith.status": str(params["status"]),
                                             **({"warpsmith.parent_attempt": str(params["parent"])}
                                                if "parent" in params else {}),
                                             **({"warpsmith.gpu": str(params["gpu"])} if "gpu" in params else {})})
        cid = child.info.run_id
        self.client.log_batch(cid, metrics=[Metric(k, float(v), now, 0) for k, v in own.items()],
                              params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                              tags=[RunTag("warpsmith.parent_session", run)])
        for name, text in files.items():
            self.client.log_text(cid, text, name)
        # A candidate rejected early was correct, only slow: not a failed run.
        self.client.set_terminated(cid, "FINISHED" if params["status"] in (Status.OK, Status.REJECTED_EARLY) else "FAILED")

    def log_budget(self, budget: int) -> None:
        if self.run_id:
            self._later("log_budget", self.client.set_tag, self.run_id, "warpsmith.budget", str(budget))

    def log_result(self, result: SessionResult) -> None:
        """result_score_ms and result_speedup_vs_libraries (what `runs` shows), and per case the
        time, the serving variant and the speed-up against the fastest library there."""
        if not self.run_id:
            return
        metrics = {"result_score_ms": result.score_ms, "result_dispatch": float(result.served_by == "dispatch"),
                   **({"result_speedup_vs_libraries": result.speedup} if result.speedup else {})}
        for c in result.cases:
            metrics[f"result_ms.{c.case}"] = c.ours_ms
            if c.speedup:
                metrics[f"result_speedup.{c.case}"] = c.speedup
        self._later("log_result", self._write_result, self.run_id, metrics, "\n".join([result.headline(), "", *result.table()]))

    def _write_result(self, run: str, metrics: dict[str, float], text: str) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        self.client.log_batch(run, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
        self.client.log_text(run, text, "result.md")

    def log_best(self, files: dict[str, str]) -> None:
        if self.run_id:
            for name, text in files.items():
                self._later("log_best", self.client.log_text, self.run_id, text, f"best/{name}")


def session_runs(client: MlflowClient, workload: Optional[str] = None) -> list[Run]:
    """The sessions' parent runs, newest first (attempts' child runs left out)."""
    exps = [e for e in client.search_experiments() if not workload or e.name == workload]
    if not exps:
        return []
    # Sessions carry the warpsmith.session tag, attempts do not: filtered by the store, so
    # thousands of attempts never push sessions out of a page.
    runs = client.search_runs([e.experiment_id for e in exps], "tags.`warpsmith.session` LIKE '%'",
                              order_by=["attributes.start_time DESC"], max_results=5000)
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags]


def attempt_runs(client: MlflowClient, parent_run_id: str, page_size: int = 1000) -> list[Run]:
    """A session's child runs, one per attempt, in iteration order."""
    parent = client.get_run(parent_run_id)
    runs: list[Run] = []
    token: Optional[str] = None
    while True:  # paged: a long session has more attempts than one page holds
        page = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}'",
                                  max_results=page_size, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    return sorted(runs, key=lambda r: int(r.data.tags.get("warpsmith.iteration", 0)))
