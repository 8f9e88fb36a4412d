"""The reflect node: a passed attempt challenges the best (re-timed beside it, validated on
fresh inputs), the per-case winners are updated, and the attempt is recorded and counted.
"""

from __future__ import annotations

import time
from typing import Optional

from langgraph.runtime import Runtime

from ...evaluate.ahead import AttemptScheduler
from ...evaluate.dispatch import update_winners
from ...evaluate.records import Best
from ...evaluate.results import Status
from ...evaluate.selection import challenge
from .. import events
from ..archive import archive_attempt
from ..context import LoopContext
from ..limits import Spent
from ..state import LoopState, StateUpdate, attempt_in_flight, candidate_in_flight
from .budget import apply_budget, stop_reason_after
from .outcomes import bests_of, medians
from .streaming import case_events


def reflect(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    ctx = runtime.context
    attempt = attempt_in_flight(state)
    runtime.stream_writer(events.NodeStarted("reflect", attempt.iteration))
    best: Optional[Best] = state.get("best")
    update: StateUpdate = {}
    score = attempt.score_ms
    if attempt.status == Status.OK and score is not None:
        spec = candidate_in_flight(state)
        verdict = challenge(ctx.evaluator, spec.to_candidate(), score, best.spec.to_candidate() if best else None,
                            best.score_ms if best else None, case_events(runtime, attempt.iteration))
        if verdict.accepted:
            attempt = attempt.model_copy(update={"new_best": True})
            best = Best(spec=spec, score_ms=score, cases=attempt.cases,
                        iteration=attempt.iteration, profile=attempt.profile)
            update["best"] = best
            base = state.get("baseline_score_ms")
            runtime.stream_writer(events.NewBest(attempt.iteration, attempt.name, best.score_ms,
                                                 base / best.score_ms if base else None))
        elif verdict.status != Status.OK:
            detail = "\n".join(d for d in (verdict.detail, attempt.detail) if d)  # keeps a SUSPECT note
            attempt = attempt.model_copy(update={"status": verdict.status, "detail": detail, "score_ms": None})
    if attempt.status == Status.OK:  # per-case winners, for the dispatch (a kernel serving some cases only too)
        update["winners"] = update_winners(state.get("winners", {}), attempt.iteration, candidate_in_flight(state),
                                           medians(attempt.cases))
    if isinstance(ctx.evaluator, AttemptScheduler) and ctx.early_reject and ("best" in update or "winners" in update):
        ctx.evaluator.update_bests(*bests_of(update.get("best", state.get("best")),
                                              update.get("winners", state.get("winners", {}))))  # the step's attempts not begun yet
    runtime.stream_writer(events.AttemptFinished(attempt.iteration, attempt.name, attempt.status, attempt.score_ms,
                                                 attempt.detail, attempt.gpu))
    ctx.tracker.log_attempt(attempt, state.get("pending"), best, state.get("baseline_score_ms"))
    pending = state.get("pending")
    if ctx.archive is not None and pending is not None:
        archive_attempt(ctx.archive, attempt, pending)
    update.update(apply_budget(state, runtime))
    spent = state.get("spent", Spent())
    # Since the attempt began, or since this run began if it was paused or stopped mid-attempt.
    started = max(state.get("attempt_started", time.time()), ctx.run_started)
    update["spent"] = Spent(elapsed_s=spent.elapsed_s + max(0.0, time.time() - started),
                            tokens=spent.tokens + attempt.tokens, cost_usd=spent.cost_usd + attempt.cost_usd)
    finished = stop_reason_after(state, update, attempt.iteration)
    return {**update, "attempt": attempt, "history": state.get("history", []) + [attempt],
            "iteration": attempt.iteration,
            "mode": "optimise" if attempt.status in (Status.OK, Status.REJECTED_EARLY) else "repair",
            "finished": finished}
