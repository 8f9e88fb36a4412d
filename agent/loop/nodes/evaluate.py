"""The nodes that put an attempt on the GPU: evaluate (the attempt whole, from candidate to
verdict, told the bests so that a clearly slower candidate stops early) and, with
--use-nsight, profile.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ...evaluate.attempt import AttemptResult
from ...evaluate.results import Status
from ...profiling.profiler import ProfilerUnavailable
from ...spec.expr import ExprError
from .. import events
from ..archive import archive_samples
from ..context import LoopContext
from ..state import LoopState, StateUpdate, attempt_in_flight, candidate_in_flight
from .outcomes import attempt_job, bests, outcomes
from .streaming import case_events, ran


def evaluate(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    """The attempt in flight as one job (agent/evaluate/attempt.py): compiled and audited,
    screened against the bests, validated, then timed, revalidated and gated. It streams
    the compile outcome and each case as the GPU side reports them (for a job run ahead of
    the graph, when its result is taken), and leaves the verdict in the attempt's record;
    reflect decides what becomes of it."""
    ctx = runtime.context
    attempt = attempt_in_flight(state)
    runtime.stream_writer(events.NodeStarted("evaluate", attempt.iteration))
    try:
        candidate = candidate_in_flight(state).to_candidate()
    except (ExprError, ValueError) as e:
        return {"attempt": attempt.model_copy(update={"status": Status.LAUNCH_INVALID, "detail": f"launch rule: {e}"})}
    r = ctx.evaluator.run_attempt(attempt_job(ctx, state, candidate, attempt.iteration),
                                  case_events(runtime, attempt.iteration, compiles=True))
    ran(runtime, attempt.iteration, "validate", r.validated)
    if r.timed is not None:
        ran(runtime, attempt.iteration, "time", r.timed)
    return {"attempt": attempt.model_copy(update=_verdict(state, runtime, r))}


def _verdict(state: LoopState, runtime: Runtime[LoopContext], r: AttemptResult) -> StateUpdate:
    """What the attempt's record takes from its result: status, detail, score, each case's
    outcome (against its speed-of-light floor once timed) and the GPU it ran on."""
    ctx, iteration = runtime.context, attempt_in_flight(state).iteration
    result = r.verdict
    measured = r.timed is not None or result.status == Status.REJECTED_EARLY  # samples to keep, floors to compare with
    if not measured:  # a verdict before or in the validation
        return {"status": result.status, "detail": result.detail, "gpu": result.gpu,
                "cases": outcomes(result, ctx.workload, None)}
    if ctx.archive is not None:
        archive_samples(ctx.archive, iteration, result, *bests(state))
    cases = outcomes(result, ctx.workload, ctx.evaluator.ceilings)
    detail = result.detail
    suspects = [f"{c.case} at {c.pct_of_floor:.0%} of its floor" for c in cases if c.suspect]
    if suspects and r.timed is not None:  # reflect's fresh-seed revalidation still decides; the flag stays on the record
        detail = (detail + "\n" if detail else "") + "SUSPECT, faster than physically possible: " + ", ".join(suspects)
    return {"status": result.status, "detail": detail, "score_ms": result.score_ms, "cases": cases, "gpu": result.gpu}


def profile(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    """--use-nsight: Nsight Compute on each performance case of a candidate that passed.
    A profiler that cannot run says so once and the session goes on without it."""
    ctx, attempt = runtime.context, attempt_in_flight(state)
    assert ctx.profiler is not None  # routed here only with a profiler (graph._after_evaluate)
    runtime.stream_writer(events.NodeStarted("profile", attempt.iteration))
    cases = [c.name for c in ctx.workload.cases if c.timed]
    try:
        ceilings = ctx.evaluator.ceilings
        profiles = ctx.profiler.profile(candidate_in_flight(state), cases, tag=f"attempt-{attempt.iteration:03d}",
                                        **({"bandwidth_gbs": ceilings.bandwidth_gbs} if ceilings else {}))
    except ProfilerUnavailable as e:
        if not e.transient:
            ctx.profiler = None
        runtime.stream_writer(events.Notice(f"nsight: {e}" + ("" if e.transient else "; profiling is off for this session")))
        return {}
    findings = tuple(dict.fromkeys(f for p in profiles for f in p.findings))
    runtime.stream_writer(events.Profiled(attempt.iteration, tuple(f"{p.case}: {p.summary}" for p in profiles), findings))
    return {"attempt": attempt.model_copy(update={"profile": profiles})}
