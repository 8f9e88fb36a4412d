"""The budget and limits a running session may be given (from the app or the command
line), and whether the session stops after this attempt.
"""

from __future__ import annotations

from typing import Optional

from langgraph.runtime import Runtime

from .. import events
from ..context import LoopContext
from ..limits import Limits, stop_reason
from ..state import LoopState, StateUpdate


def apply_budget(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    """Budget and limit changes asked for since the last step (running or paused)."""
    update: StateUpdate = {}
    control = runtime.context.control
    changes = control.take_limits()
    if changes:
        limits = state.get("limits", Limits()).merged(changes)
        runtime.stream_writer(events.LimitsChanged(limits.text()))
        update["limits"] = limits
    new = control.take_budget()
    if new is not None and new != state["budget"]:
        runtime.stream_writer(events.BudgetChanged(state["budget"], new))
        runtime.context.tracker.log_budget(new)
        update["budget"] = new
    return update


def stop_reason_after(state: LoopState, update: StateUpdate, iteration: int) -> Optional[str]:
    best = update.get("best", state.get("best"))
    return stop_reason(iteration, update.get("budget", state["budget"]), update.get("limits", state.get("limits")),
                       update.get("spent", state.get("spent")), best.iteration if best else 0)
