"""The conclude node: at a session's end, a variant per shape when the per-case winners
differ from the best, and the session's result.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ...evaluate.ahead import AttemptScheduler
from ...evaluate.dispatch import build_dispatch
from ...evaluate.session_result import session_result
from .. import events
from ..context import LoopContext
from ..state import LoopState, StateUpdate
from .streaming import case_events


def conclude(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    """At the end of a session: a variant per shape, when the per-case winners differ from
    the best (agent/evaluate/dispatch.py); re-timed beside the best, so it costs a few
    evaluations. The dispatch is kept (and reported) whether or not it pays."""
    if isinstance(runtime.context.evaluator, AttemptScheduler):  # the budget's end: nothing more ahead
        runtime.context.evaluator.cancel()
    best, winners = state.get("best"), state.get("winners", {})
    dispatch = None
    if winners:
        runtime.stream_writer(events.NodeStarted("conclude", state.get("iteration", 0)))
        dispatch = build_dispatch(runtime.context.evaluator, runtime.context.workload, winners,
                                  best.spec if best else None, case_events(runtime, state.get("iteration", 0)))
        if dispatch is not None:
            runtime.stream_writer(events.Notice("variant per shape: " + dispatch.lines()[-1]))
    result = session_result(best, dispatch, state.get("libraries", {}))
    if result is not None:
        runtime.stream_writer(events.ResultReady(result.served_by, result.score_ms, result.speedup, result.headline(),
                                                 {c.case: c.ours_ms for c in result.cases}))
        runtime.context.tracker.log_result(result)
    return {"dispatch": dispatch, "result": result}
