"""Past sessions read back from the MLflow store, as typed rows: what `warpsmith runs`
prints and the app's past-runs screen shows, from one query."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from .tracker import Tracker

from .tracker import attempt_runs, session_runs


@dataclass(frozen=True)
class PastRun:
    """A session: its parent run."""

    session: str
    run_id: str
    started: float  # epoch seconds
    workload: str
    proposer: str
    best_ms: Optional[float]  # the result's geomean (the dispatch's where it paid), else the best's
    speedup: Optional[float]  # against the fastest library of each case (older sessions: the best over the baseline)
    status: str  # the MLflow run's: RUNNING, FINISHED, KILLED, FAILED


@dataclass(frozen=True)
class PastAttempt:
    """An attempt of a session: its child run."""

    iteration: Optional[int]
    run_id: str
    status: str
    score_ms: Optional[float]
    knobs: tuple[tuple[str, str], ...]  # (name, value), by name


def past_runs(client: MlflowClient, workload: Optional[str] = None) -> list[PastRun]:
    """The sessions in the store (only `workload`'s if given), newest first."""
    return [PastRun(r.info.run_name, r.info.run_id, r.info.start_time / 1000,
                    r.data.tags.get("warpsmith.workload", "?"), r.data.params.get("proposer", "?"),
                    r.data.metrics.get("result_score_ms", r.data.metrics.get("best_score_ms")),
                    r.data.metrics.get("result_speedup_vs_libraries", r.data.metrics.get("best_speedup_vs_baseline")),
                    r.info.status)
            for r in session_runs(client, workload)]


def past_attempts(client: MlflowClient, run: PastRun) -> list[PastAttempt]:
    """A session's attempts, in iteration order."""
    out = []
    for c in attempt_runs(client, run.run_id):
        iteration = c.data.tags.get("warpsmith.iteration")
        knobs = tuple((k.removeprefix("knob."), v) for k, v in sorted(c.data.params.items()) if k.startswith("knob."))
        out.append(PastAttempt(int(iteration) if iteration else None, c.info.run_id, c.info.status,
                               c.data.metrics.get("score_ms"), knobs))
    return out


class RunsSource:
    """The past-runs screen's reads from a tracker's MLflow store (warpsmith.agent.tracking.Tracker)."""

    def __init__(self, tracker: Tracker):
        self.client = tracker.client

    def runs(self) -> list[PastRun]:
        return past_runs(self.client)

    def best_kernel(self, run: PastRun) -> str:
        return self._text(run, "best/kernel.cu") or "// no kernel passed validation in this session"

    def report(self, run: PastRun) -> str:
        return self._text(run, "best/report.md") or "_no report_"

    def trend(self, run: PastRun) -> list[float]:
        return [m.value for m in sorted(self.client.get_metric_history(run.run_id, "best_score_ms"), key=lambda m: m.step)]

    def _text(self, run: PastRun, path: str) -> str:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                return Path(self.client.download_artifacts(run.run_id, path, tmp)).read_text()
        except Exception:  # no such artifact: the session found no valid kernel
            return ""
