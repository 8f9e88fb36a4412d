"""What a session logs its run to: the MLflow tracker (agent/tracking/tracker.py) or
nothing at all (``NullTracker``, --no-tracking). The loop, the session and the CLI
name this protocol; only what is MLflow's own (its client for the past-runs screen,
its URI for tracing) is asked of the MLflow ``Tracker`` by name."""

from __future__ import annotations

from typing import Any, Optional, Protocol

from ..evaluate.records import Attempt, Best, CandidateSpec
from ..evaluate.results import EvaluationResult
from ..evaluate.session_result import SessionResult
from ..runtime.device_facts import DeviceFacts


class SessionTracker(Protocol):
    def start(self, workload: str, session_id: str, params: dict[str, Any]) -> Optional[str]:
        """A run for a new session; its id, or None if the store failed."""
        ...

    def reopen(self, run_id: str) -> None:
        """Go on logging to a resumed session's run."""
        ...

    def end_session(self, session_status: str) -> None:
        """A session's end (finished, failed, stopped, paused) as the run's status."""
        ...

    def end(self, status: str) -> None:
        """The run's own status: FINISHED, KILLED or FAILED."""
        ...

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait for queued logging, at most timeout_s."""
        ...

    def log_plan(self, facts: DeviceFacts, baseline: dict[str, float], baseline_score: Optional[float],
                 start: Optional[Best], result: Optional[EvaluationResult]) -> None:
        ...

    def log_attempt(self, attempt: Attempt, spec: Optional[CandidateSpec], best: Optional[Best],
                    baseline_score: Optional[float]) -> None:
        ...

    def log_budget(self, budget: int) -> None:
        ...

    def log_best(self, files: dict[str, str]) -> None:
        ...

    def log_result(self, result: SessionResult) -> None:
        """The session's result: its time and speed-up against the fastest library, per case and overall."""
        ...


class NullTracker(SessionTracker):
    """Tracking switched off (--no-tracking): every call does nothing."""

    def start(self, workload: str, session_id: str, params: dict[str, Any]) -> Optional[str]:
        return None

    def reopen(self, run_id: str) -> None:
        pass

    def end_session(self, session_status: str) -> None:
        pass

    def end(self, status: str) -> None:
        pass

    def flush(self, timeout_s: float = 60.0) -> None:
        pass

    def log_plan(self, facts: DeviceFacts, baseline: dict[str, float], baseline_score: Optional[float],
                 start: Optional[Best], result: Optional[EvaluationResult]) -> None:
        pass

    def log_attempt(self, attempt: Attempt, spec: Optional[CandidateSpec], best: Optional[Best],
                    baseline_score: Optional[float]) -> None:
        pass

    def log_budget(self, budget: int) -> None:
        pass

    def log_best(self, files: dict[str, str]) -> None:
        pass

    def log_result(self, result: SessionResult) -> None:
        pass
