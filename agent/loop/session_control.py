"""What a front end may do to a running session, from any thread: pause or stop at
the next step boundary (LangGraph's RunControl drains the run; the checkpoint
keeps everything), stop now (the same, and the step in flight is abandoned: the
GPU work killed, the model call left unanswered), and change the iteration budget
and the other limits."""

from __future__ import annotations

import threading
from typing import Optional

from langgraph.runtime import RunControl


class SessionControl:
    def __init__(self) -> None:
        self._lock = threading.RLock()  # a SIGTERM handler may call request() while this thread holds it
        self._budget: Optional[int] = None
        self._limits: Optional[dict[str, Optional[float]]] = None
        self._run: Optional[RunControl] = None
        self._reason: Optional[str] = None
        # A plain flag, not a threading.Event: a SIGTERM handler sets it, and Event.set
        # could deadlock on the lock the interrupted main thread holds inside Event.wait.
        self._now = False

    def new_run(self) -> RunControl:
        """A fresh RunControl for each stream() call (a drained one stays drained)."""
        with self._lock:
            self._run = RunControl()
            if self._reason is not None:  # asked for before this run started: honour it
                self._run.request_drain(self._reason)
            return self._run

    def clear(self) -> None:
        """The request was honoured (the run drained)."""
        with self._lock:
            self._reason = None
            self._now = False

    def set_budget(self, budget: int) -> None:
        """Takes effect at the next step boundary, while running or paused."""
        if budget < 0:
            raise ValueError("the budget cannot be negative")
        with self._lock:
            self._budget = budget

    def set_limits(self, **changes: Optional[float]) -> None:
        """time_s, tokens, cost_usd, patience: new values (0 removes one), applied at the next step."""
        with self._lock:
            self._limits = {**(self._limits or {}), **changes}

    def take_limits(self) -> Optional[dict[str, Optional[float]]]:
        with self._lock:
            limits, self._limits = self._limits, None
            return limits

    def take_budget(self) -> Optional[int]:
        with self._lock:
            budget, self._budget = self._budget, None
            return budget

    def request(self, reason: str) -> None:
        """reason: "pause" or "stop"; honoured at the next step boundary."""
        with self._lock:
            self._reason = reason
            if self._run is not None:
                self._run.request_drain(reason)

    def stop_now(self) -> None:
        """Stop, and abandon the step in flight: a waiting model call raises
        ModelCallAborted at its next look at :attr:`stopping_now` (every 0.1 s).
        Safe from a signal handler. The GPU side is the evaluator's abort()."""
        self.request("stop")
        self._now = True

    @property
    def stopping_now(self) -> bool:
        return self._now

    @property
    def requested(self) -> Optional[str]:
        return self._reason
