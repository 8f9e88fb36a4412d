"""The nodes that put an attempt on the GPU: compile, validate, benchmark (told the bests,
so a clearly slower candidate stops early) and, with --use-nsight, profile.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ...evaluate.results import Progress, Status
from ...profiling.profiler import ProfilerUnavailable
from ...spec.expr import ExprError
from .. import events
from ..archive import archive_samples
from ..context import LoopContext
from ..state import LoopState, StateUpdate, attempt_in_flight, candidate_in_flight
from .outcomes import bests, outcomes
from .streaming import ran, stream_cases


def compile_node(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    attempt, spec = attempt_in_flight(state), candidate_in_flight(state)
    runtime.stream_writer(events.NodeStarted("compile", attempt.iteration))
    try:
        candidate = spec.to_candidate()
    except (ExprError, ValueError) as e:
        return {"attempt": attempt.model_copy(update={"status": Status.LAUNCH_INVALID, "detail": f"launch rule: {e}"})}
    compiled = runtime.context.evaluator.compile(candidate)
    runtime.stream_writer(events.CompileFinished(attempt.iteration, compiled.ok, compiled.compile_ms,
                                                 compiled.resources.text(), compiled.log, compiled.cached))
    if not compiled.ok:
        return {"attempt": attempt.model_copy(update={"status": Status.COMPILE_FAILED, "detail": compiled.log})}
    return {"attempt": attempt.model_copy(update={"status": Progress.COMPILED})}


def validate(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    attempt = attempt_in_flight(state)
    runtime.stream_writer(events.NodeStarted("validate", attempt.iteration))
    stream_cases(runtime, attempt.iteration)
    ctx = runtime.context
    best_ms, case_best = bests(state)
    # Told the best, the evaluator screens first: a clearly slower candidate is rejected
    # early without a validation (agent/evaluate/evaluator.py, validate()).
    r = ctx.evaluator.validate(candidate_in_flight(state).to_candidate(), best_ms=best_ms if ctx.early_reject else None,
                               case_best_ms=case_best)
    ran(runtime, attempt.iteration, "validate", r)
    if r.status == Status.REJECTED_EARLY:
        if ctx.archive is not None:
            archive_samples(ctx.archive, attempt.iteration, r, best_ms, case_best)
        return {"attempt": attempt.model_copy(update={"status": r.status, "detail": r.detail, "gpu": r.gpu,
                                                      "cases": outcomes(r, ctx.workload, ctx.evaluator.ceilings)})}
    status = Progress.VALIDATED if r.ok else r.status
    cases = outcomes(r, ctx.workload, None)  # untimed: no floor to compare with
    return {"attempt": attempt.model_copy(update={"status": status, "detail": r.detail, "cases": cases, "gpu": r.gpu})}


def benchmark(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    attempt = attempt_in_flight(state)
    runtime.stream_writer(events.NodeStarted("benchmark", attempt.iteration))
    stream_cases(runtime, attempt.iteration)
    ctx = runtime.context
    ev = ctx.evaluator
    best_ms, case_best = bests(state)
    # Continues what validate() began, on the same worker (which screened it already, told
    # the best); a backend that did not screen it may still stop one early that could be
    # neither the best nor a case's winner.
    r = ev.benchmark(candidate_in_flight(state).to_candidate(), best_ms=best_ms if ctx.early_reject else None,
                     case_best_ms=case_best)
    ran(runtime, attempt.iteration, "benchmark", r)
    if ctx.archive is not None:
        archive_samples(ctx.archive, attempt.iteration, r, best_ms, case_best)
    cases = outcomes(r, ctx.workload, ev.ceilings)
    detail = r.detail
    suspects = [f"{c.case} at {c.pct_of_floor:.0%} of its floor" for c in cases if c.suspect]
    if suspects:  # reflect's fresh-seed revalidation still decides; the flag stays on the record
        detail = (detail + "\n" if detail else "") + "SUSPECT, faster than physically possible: " + ", ".join(suspects)
    return {"attempt": attempt.model_copy(update={"status": r.status, "detail": detail, "score_ms": r.score_ms,
                                                  "cases": cases, "gpu": r.gpu})}


def profile(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    """--use-nsight: Nsight Compute on each performance case of a candidate that passed.
    A profiler that cannot run says so once and the session goes on without it."""
    ctx, attempt = runtime.context, attempt_in_flight(state)
    assert ctx.profiler is not None  # routed here only with a profiler (graph._after_benchmark)
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
