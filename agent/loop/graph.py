"""The loop as a LangGraph StateGraph:

    plan -> propose -> compile -> validate -> benchmark -> reflect -> propose ... -> END

A step's proposals may be a batch (--batch): the first goes on at once, the others
wait in state (`queued`) and are taken by the next propose nodes, one attempt each,
before the proposer is asked again. Evaluated ahead (agent/evaluate/ahead.py), a step's
candidates run on the GPU while the graph reflects on the earlier ones, and a tuner's
next step is proposed in the background once less than a step is left to run
(agent/loop/proposals_ahead.py). benchmark tells the evaluator the best score, so a
clearly slower candidate stops timing early (``rejected_early``, not a failure: the
next proposal still optimises). A failure at compile or validate goes straight to
reflect, which switches the next proposal to repair mode; every attempt, repairs included, counts against
the budget held in state. Nodes reach the GPU, the proposer and the tracker
through the run's context; they stream typed events (agent.loop.events) for any
front end and leave their results in the checkpointed state.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from ..evaluate.ahead import AheadEvaluator
from ..evaluate.backend import EvaluationBackend
from ..evaluate.dispatch import build_dispatch, update_winners
from ..evaluate.evaluator import FRESH_SEED
from ..evaluate.records import Attempt, AttemptSamples, Best, CandidateSpec, CaseOutcome
from ..evaluate.results import EvaluationResult, Progress, Status
from ..evaluate.selection import challenge
from ..evaluate.session_result import fastest_libraries, session_result
from ..evaluate.stats import TimingStats, geomean
from ..profiling.nsight import Nsight
from ..profiling.profiler import ProfilerUnavailable
from ..proposers.base import (
    Proposal,
    ProposalContext,
    ProposalError,
    Proposer,
    SearchExhausted,
    prepare,
    propose_step,
    proposes_ahead,
)
from ..runtime.device_facts import DeviceFacts
from ..spec.candidate import Candidate
from ..spec.expr import ExprError
from ..spec.reference_run import REFERENCE_TIMEOUT_S
from ..spec.references import prefetch_references
from ..spec.speed_of_light import Ceilings, case_floor
from ..spec.workload_model import Workload
from ..tracking.session_tracker import SessionTracker
from ..worker.footprint import check_memory
from ..worker.protocol import CaseChecked, CaseTimed
from . import events
from .limits import Limits, Spent, stop_reason
from .proposals_ahead import ProposalsAhead
from .session_control import SessionControl
from .state import LoopState

NODES = ("plan", "propose", "compile", "validate", "benchmark", "profile", "reflect", "conclude")


@dataclass
class LoopContext:
    workload: Workload
    evaluator: EvaluationBackend
    proposer: Proposer
    control: SessionControl
    tracker: SessionTracker
    profiler: Optional[Nsight] = None  # --use-nsight
    archive: Optional[Path] = None  # where each attempt's kernel is kept (the session's attempts/ folder)
    run_started: float = field(default_factory=time.time)  # this stream() call's start: paused time never counts
    early_reject: bool = True  # --no-early-reject: every candidate timed in full
    batch: int = 1  # --batch: candidates proposed per step, each its own attempt
    # The tuner's next step, proposed in the background while this one runs (evaluated ahead only).
    proposals_ahead: ProposalsAhead = field(default_factory=ProposalsAhead)


def outcomes(result: EvaluationResult, workload: Workload, ceilings: Optional[Ceilings]) -> list[CaseOutcome]:
    out = []
    for c in result.cases:
        floor = (case_floor(workload, workload.case(c.case), ceilings, c.timing.median_ms)
                 if ceilings and c.timing else None)
        out.append(CaseOutcome(case=c.case, role=c.role, status=c.status,
                               max_rel_error=c.check.max_rel_error if c.check else None,
                               median_ms=c.timing.median_ms if c.timing else None,
                               cv=c.timing.cv if c.timing else None,
                               pct_of_floor=floor.pct_of_floor if floor else None,
                               suspect=bool(floor and floor.suspect), clocks_mhz=list(c.clocks_mhz)))
    return out


def _stream_cases(runtime: Runtime[LoopContext], iteration: int) -> None:
    """Forward the worker's per-case replies as they arrive."""
    write = runtime.stream_writer
    def on_event(reply):
        if isinstance(reply, CaseChecked):
            write(events.CaseFinished(iteration, reply.case, reply.phase, reply.check.status, reply.check.max_rel_error,
                                      elapsed_ms=reply.elapsed_ms))
        elif isinstance(reply, CaseTimed):
            write(events.CaseFinished(iteration, reply.case, "time", Status.OK, None, TimingStats.of(reply.samples_ms).median_ms,
                                      elapsed_ms=reply.elapsed_ms))
    runtime.context.evaluator.on_event = on_event


def _apply_budget(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    """Budget and limit changes asked for since the last step (running or paused)."""
    update: dict = {}
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


def _stop_reason(state: LoopState, update: dict, iteration: int) -> Optional[str]:
    best = update.get("best", state.get("best"))
    return stop_reason(iteration, update.get("budget", state["budget"]), update.get("limits", state.get("limits")),
                       update.get("spent", state.get("spent")), best.iteration if best else 0)


def plan(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    ctx = runtime.context
    runtime.stream_writer(events.NodeStarted("plan", 0))
    ev, w = ctx.evaluator, ctx.workload
    facts = ev.facts
    check_memory(w, gpu_bytes=facts.total_memory or None, host=False)  # every case fits this GPU, or one line
    _stream_cases(runtime, 0)
    # The fresh seed's references, computed while the baseline and the starting kernel run:
    # the first new best's check on fresh inputs then does not wait for them.
    prefetch_references(w, FRESH_SEED, getattr(ev, "reference_timeout_s", REFERENCE_TIMEOUT_S))  # --reference-timeout
    # And the first step's compiles, while the baselines and the starting kernel keep the GPU busy.
    prepare(ctx.proposer, ProposalContext(w, facts, 1, state.get("mode", "optimise"), state.get("history", []),
                                          None, None, {}, lambda: ctx.control.stopping_now))
    # Every library, timed once: per case the fastest is what the session is measured against.
    libraries = fastest_libraries(ev)
    baseline = {case: lib.median_ms for case, lib in libraries.items()}
    timed = [c.name for c in w.cases if c.timed]
    baseline_score = geomean([baseline[c] for c in timed]) if timed and all(c in baseline for c in timed) else None
    ceilings = ev.ceilings
    floors = {c.name: f.floor_ms for c in w.cases if c.timed and (f := case_floor(w, c, ceilings)) is not None} if ceilings else {}
    runtime.stream_writer(events.Planned(facts.name or "?", baseline, baseline_score, floors,
                                         ceilings.source if ceilings else ""))
    start, r = None, None
    if w.start_kernel is not None:  # else from scratch: the proposer writes the first kernel
        spec = CandidateSpec.from_candidate(Candidate.from_spec(w.start_kernel), "start", "the workload's starting kernel")
        r = ev.evaluate(spec.to_candidate())
        # A starting kernel that does not apply to every performance case has no score to be
        # the best with; the cases it serves still seed the dispatch's winners.
        start = Best(spec=spec, score_ms=r.score_ms, cases=outcomes(r, w, ceilings), iteration=0) \
            if r.ok and r.score_ms is not None else None
    if start:
        runtime.stream_writer(events.NewBest(0, spec.name, start.score_ms,
                                             baseline_score / start.score_ms if baseline_score else None))
    ctx.tracker.log_plan(facts, baseline, baseline_score, start, r)
    winners = update_winners({}, 0, spec, _medians(outcomes(r, w, ceilings))) if r is not None and r.ok else {}
    return {"facts": facts.to_dict(), "baseline": baseline, "baseline_score_ms": baseline_score,
            "libraries": libraries, "start": start,
            "best": start, "iteration": state.get("iteration", 0), "history": state.get("history", []),
            "mode": "optimise", "finished": None, "winners": winners}


def _steps(spec: CandidateSpec) -> tuple[str, ...]:
    """A program's lines for the app; nothing for one launch or a malformed program (the
    compile node reports that one)."""
    try:
        program = spec.to_candidate().program if spec.program else None
    except ValueError:
        return ()
    return tuple(program.describe()) if program else ()


def _medians(cases: list[CaseOutcome]) -> dict[str, float]:
    return {c.case: c.median_ms for c in cases if c.role == "performance" and c.median_ms}


def propose(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    ctx = runtime.context
    update = _apply_budget(state, runtime)
    reason = _stop_reason(state, update, state["iteration"])
    if reason:  # e.g. the budget lowered to what is already done: no more attempts
        return {**update, "finished": reason}
    iteration = state["iteration"] + 1
    started = time.time()
    runtime.stream_writer(events.NodeStarted("propose", iteration))
    history = state.get("history", [])
    pctx = ProposalContext(ctx.workload, DeviceFacts.from_dict(state.get("facts", {})), iteration, state.get("mode", "optimise"), history,
                           state.get("best"), history[-1] if history else None, state.get("baseline", {}),
                           lambda: ctx.control.stopping_now)
    queued = state.get("queued") or []
    budget = update.get("budget", state["budget"])
    ahead = ctx.proposals_ahead if _looks_ahead(ctx) else None
    if not queued and ahead is not None and ahead.under_way:  # the queue ran dry: wait for the next step
        queued = _take_ahead(runtime, state, ahead.wait(), iteration, budget)
    if queued:  # the rest of this step's batch: proposed already, one attempt each
        proposal, update["queued"] = Proposal(queued[0]), queued[1:]
        if ahead is not None:
            update["queued"] = update["queued"] + _take_ahead(runtime, state, ahead.ready() or [],
                                                              iteration + len(queued), budget)
            in_flight = [queued[0]] + update["queued"]
            if len(in_flight) - 1 < ctx.batch and not ahead.under_way and iteration + len(in_flight) <= budget:
                # Less than a step left to run: the next one, proposed while these run.
                ahead.start(functools.partial(propose_step, ctx.proposer, replace(
                    pctx, iteration=iteration + len(in_flight), in_flight=tuple(in_flight)), ctx.batch))
    else:
        try:  # ModelCallAborted ("stop now") passes through: no attempt, the checkpoint stays before this step
            batch = propose_step(ctx.proposer, pctx, ctx.batch)
        except SearchExhausted as e:
            return {**update, "pending": None, "finished": f"tuner's search space ({e})"}
        except ProposalError as e:
            attempt = Attempt(iteration=iteration, name="(none)", proposer=ctx.proposer.name,
                              status=Status.PROPOSAL_INVALID, detail=str(e), tokens=e.tokens, cost_usd=e.cost_usd)
            return {**update, "pending": None, "attempt": attempt, "attempt_started": started}
        proposal, update["queued"] = batch[0], [p.spec for p in batch[1:]]
        if len(batch) > 1:
            if isinstance(ctx.evaluator, AheadEvaluator):
                _submit_ahead(ctx.evaluator, state, batch, budget - iteration + 1, ctx.early_reject)
            runtime.stream_writer(events.Notice(f"step of {len(batch)} candidates: attempts {iteration}-"
                                                f"{iteration + len(batch) - 1}"))
    spec = proposal.spec
    if proposal.notice:
        runtime.stream_writer(events.Notice(proposal.notice))
    runtime.stream_writer(events.CandidateProposed(iteration, spec.name, spec.proposer or ctx.proposer.name,
                                                   spec.rationale, spec.source, proposal.tokens, _steps(spec),
                                                   spec.parent, spec.focus))
    attempt = Attempt(iteration=iteration, name=spec.name, proposer=spec.proposer or ctx.proposer.name,
                      status=Progress.PENDING, defines=spec.defines, tokens=proposal.tokens, cost_usd=proposal.cost_usd,
                      sources=list(proposal.sources), parent=spec.parent, focus=spec.focus)
    return {**update, "pending": spec, "attempt": attempt, "attempt_started": started}


def _looks_ahead(ctx: LoopContext) -> bool:
    return ctx.batch > 1 and isinstance(ctx.evaluator, AheadEvaluator) and proposes_ahead(ctx.proposer)


def _take_ahead(runtime: Runtime[LoopContext], state: LoopState, batch: list[Proposal], first: int,
                budget: int) -> list[CandidateSpec]:
    """A step proposed in the background (agent/loop/proposals_ahead.py), its first attempt
    `first`: into the queue, and to the GPU behind what is there (as much as the budget
    has room for)."""
    if not batch:
        return []
    ctx = runtime.context
    assert isinstance(ctx.evaluator, AheadEvaluator)
    _submit_ahead(ctx.evaluator, state, batch, budget - first + 1, ctx.early_reject)
    runtime.stream_writer(events.Notice(f"next step of {len(batch)} candidates proposed ahead: attempts {first}-"
                                        f"{first + len(batch) - 1}"))
    return [p.spec for p in batch]


def _submit_ahead(evaluator: AheadEvaluator, state: LoopState, batch: list[Proposal], room: int,
                  early_reject: bool) -> None:
    """The step's candidates, as many as the budget has room for, to the GPU ahead of the
    graph (agent/evaluate/ahead.py); one whose launch rule does not parse is left to the
    compile node, which reports it."""
    candidates = []
    for p in batch[:max(0, room)]:
        try:
            candidates.append(p.spec.to_candidate())
        except (ExprError, ValueError):
            continue
    best_ms, case_best = _bests(state)
    evaluator.submit(candidates, best_ms if early_reject else None, case_best)


def compile_node(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    attempt, spec = state["attempt"], state["pending"]
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


def _bests(state: LoopState) -> tuple[Optional[float], Optional[dict[str, float]]]:
    """What early rejection compares a candidate with (and samples.json records, with
    --no-early-reject too, for the safety replay): the best score and each case's winner
    (none recorded, e.g. a checkpoint from before winners: the geomean rule alone, not
    "every case unwon")."""
    best = state.get("best")
    case_best = {case: w.median_ms for case, w in state.get("winners", {}).items()} or None
    return (best.score_ms if best else None), case_best


def validate(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    attempt = state["attempt"]
    runtime.stream_writer(events.NodeStarted("validate", attempt.iteration))
    _stream_cases(runtime, attempt.iteration)
    ctx = runtime.context
    best_ms, case_best = _bests(state)
    # Told the best, the evaluator screens first: a clearly slower candidate is rejected
    # early without a validation (agent/evaluate/evaluator.py, validate()).
    r = ctx.evaluator.validate(state["pending"].to_candidate(), best_ms=best_ms if ctx.early_reject else None,
                               case_best_ms=case_best)
    _ran(runtime, attempt.iteration, "validate", r)
    if r.status == Status.REJECTED_EARLY:
        if ctx.archive is not None:
            archive_samples(ctx.archive, attempt.iteration, r, best_ms, case_best)
        return {"attempt": attempt.model_copy(update={"status": r.status, "detail": r.detail, "gpu": r.gpu,
                                                      "cases": outcomes(r, ctx.workload, ctx.evaluator.ceilings)})}
    status = Progress.VALIDATED if r.ok else r.status
    cases = outcomes(r, ctx.workload, None)  # untimed: no floor to compare with
    return {"attempt": attempt.model_copy(update={"status": status, "detail": r.detail, "cases": cases, "gpu": r.gpu})}


def _ran(runtime: Runtime[LoopContext], iteration: int, phase: str, r: EvaluationResult) -> None:
    runtime.stream_writer(events.EvaluatorRan(iteration, phase, r.began_s, r.wall_ms.get("total"), r.wall_ms.get("call")))


def benchmark(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    attempt = state["attempt"]
    runtime.stream_writer(events.NodeStarted("benchmark", attempt.iteration))
    _stream_cases(runtime, attempt.iteration)
    ctx = runtime.context
    ev = ctx.evaluator
    best_ms, case_best = _bests(state)
    # Continues what validate() began, on the same worker (which screened it already, told
    # the best); a backend that did not screen it may still stop one early that could be
    # neither the best nor a case's winner.
    r = ev.benchmark(state["pending"].to_candidate(), best_ms=best_ms if ctx.early_reject else None,
                     case_best_ms=case_best)
    _ran(runtime, attempt.iteration, "benchmark", r)
    if ctx.archive is not None:
        archive_samples(ctx.archive, attempt.iteration, r, best_ms, case_best)
    cases = outcomes(r, ctx.workload, ev.ceilings)
    detail = r.detail
    suspects = [f"{c.case} at {c.pct_of_floor:.0%} of its floor" for c in cases if c.suspect]
    if suspects:  # reflect's fresh-seed revalidation still decides; the flag stays on the record
        detail = (detail + "\n" if detail else "") + "SUSPECT, faster than physically possible: " + ", ".join(suspects)
    return {"attempt": attempt.model_copy(update={"status": r.status, "detail": detail, "score_ms": r.score_ms,
                                                  "cases": cases, "gpu": r.gpu})}


def profile(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    """--use-nsight: Nsight Compute on each performance case of a candidate that passed.
    A profiler that cannot run says so once and the session goes on without it."""
    ctx, attempt = runtime.context, state["attempt"]
    runtime.stream_writer(events.NodeStarted("profile", attempt.iteration))
    cases = [c.name for c in ctx.workload.cases if c.timed]
    try:
        ceilings = ctx.evaluator.ceilings
        profiles = ctx.profiler.profile(state["pending"], cases, tag=f"attempt-{attempt.iteration:03d}",
                                        **({"bandwidth_gbs": ceilings.bandwidth_gbs} if ceilings else {}))
    except ProfilerUnavailable as e:
        if not e.transient:
            ctx.profiler = None
        runtime.stream_writer(events.Notice(f"nsight: {e}" + ("" if e.transient else "; profiling is off for this session")))
        return {}
    findings = tuple(dict.fromkeys(f for p in profiles for f in p.findings))
    runtime.stream_writer(events.Profiled(attempt.iteration, tuple(f"{p.case}: {p.summary}" for p in profiles), findings))
    return {"attempt": attempt.model_copy(update={"profile": profiles})}


def reflect(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    ctx = runtime.context
    attempt: Attempt = state["attempt"]
    runtime.stream_writer(events.NodeStarted("reflect", attempt.iteration))
    best: Optional[Best] = state.get("best")
    update: dict = {}
    if attempt.status == Status.OK and attempt.score_ms is not None:
        verdict = challenge(ctx.evaluator, state["pending"].to_candidate(), attempt.score_ms,
                            best.spec.to_candidate() if best else None, best.score_ms if best else None)
        if verdict.accepted:
            attempt = attempt.model_copy(update={"new_best": True})
            best = Best(spec=state["pending"], score_ms=attempt.score_ms, cases=attempt.cases,
                        iteration=attempt.iteration, profile=attempt.profile)
            update["best"] = best
            base = state.get("baseline_score_ms")
            runtime.stream_writer(events.NewBest(attempt.iteration, attempt.name, best.score_ms,
                                                 base / best.score_ms if base else None))
        elif verdict.status != Status.OK:
            detail = "\n".join(d for d in (verdict.detail, attempt.detail) if d)  # keeps a SUSPECT note
            attempt = attempt.model_copy(update={"status": verdict.status, "detail": detail, "score_ms": None})
    if attempt.status == Status.OK:  # per-case winners, for the dispatch (a kernel serving some cases only too)
        update["winners"] = update_winners(state.get("winners", {}), attempt.iteration, state["pending"],
                                           _medians(attempt.cases))
    if isinstance(ctx.evaluator, AheadEvaluator) and ctx.early_reject and ("best" in update or "winners" in update):
        ctx.evaluator.update_bests(*_bests({**state, **update}))  # the step's attempts not begun yet
    runtime.stream_writer(events.AttemptFinished(attempt.iteration, attempt.name, attempt.status, attempt.score_ms,
                                                 attempt.detail, attempt.gpu))
    ctx.tracker.log_attempt(attempt, state.get("pending"), best, state.get("baseline_score_ms"))
    if ctx.archive is not None and state.get("pending") is not None:
        archive_attempt(ctx.archive, attempt, state["pending"])
    update.update(_apply_budget(state, runtime))
    spent = state.get("spent", Spent())
    # Since the attempt began, or since this run began if it was paused or stopped mid-attempt.
    started = max(state.get("attempt_started", time.time()), ctx.run_started)
    update["spent"] = Spent(elapsed_s=spent.elapsed_s + max(0.0, time.time() - started),
                            tokens=spent.tokens + attempt.tokens, cost_usd=spent.cost_usd + attempt.cost_usd)
    finished = _stop_reason(state, update, attempt.iteration)
    return {**update, "attempt": attempt, "history": state.get("history", []) + [attempt],
            "iteration": attempt.iteration,
            "mode": "optimise" if attempt.status in (Status.OK, Status.REJECTED_EARLY) else "repair",
            "finished": finished}


def conclude(state: LoopState, runtime: Runtime[LoopContext]) -> dict:
    """At the end of a session: a variant per shape, when the per-case winners differ from
    the best (agent/evaluate/dispatch.py); re-timed beside the best, so it costs a few
    evaluations. The dispatch is kept (and reported) whether or not it pays."""
    if isinstance(runtime.context.evaluator, AheadEvaluator):  # the budget's end: nothing more ahead
        runtime.context.evaluator.cancel()
    best, winners = state.get("best"), state.get("winners", {})
    dispatch = None
    if winners:
        runtime.stream_writer(events.NodeStarted("conclude", state.get("iteration", 0)))
        _stream_cases(runtime, state.get("iteration", 0))
        dispatch = build_dispatch(runtime.context.evaluator, runtime.context.workload, winners,
                                  best.spec if best else None)
        if dispatch is not None:
            runtime.stream_writer(events.Notice("variant per shape: " + dispatch.lines()[-1]))
    result = session_result(best, dispatch, state.get("libraries", {}))
    if result is not None:
        runtime.stream_writer(events.ResultReady(result.served_by, result.score_ms, result.speedup, result.headline(),
                                                 {c.case: c.ours_ms for c in result.cases}))
        runtime.context.tracker.log_result(result)
    return {"dispatch": dispatch, "result": result}


def archive_attempt(folder: Path, attempt: Attempt, spec: CandidateSpec) -> None:
    """attempts/NNN/kernel.cu and candidate.json: what `warpsmith diff` compares."""
    d = folder / f"{attempt.iteration:03d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.cu").write_text(spec.source)
    (d / "candidate.json").write_text(spec.model_dump_json(indent=2))
    (d / "attempt.json").write_text(attempt.model_dump_json(indent=2))


def archive_samples(folder: Path, iteration: int, result: EvaluationResult, best_ms: Optional[float],
                    case_best_ms: Optional[dict[str, float]] = None) -> None:
    """attempts/NNN/samples.json: every timed sample per case (the first chunk's, when
    rejected early) and the best score and case winners it was timed against, so that the early-rejection
    rule can be replayed over recorded sessions (benchmarks/early_reject_safety.py).
    Kept beside the checkpoint, not in it: a hundred samples per case per attempt."""
    d = folder / f"{iteration:03d}"
    d.mkdir(parents=True, exist_ok=True)
    record = AttemptSamples(iteration=iteration, status=result.status, best_ms=best_ms, case_best_ms=case_best_ms,
                            cases={c.case: list(c.samples_ms) for c in result.cases if c.samples_ms},
                            screen={case: list(s) for case, s in result.screen_ms.items()})
    (d / "samples.json").write_text(record.model_dump_json())


def _after(progress: Progress, next_node: str):
    """Route on progress: on to `next_node` if the attempt got there, else (a verdict) to reflect."""
    def route(state: LoopState) -> str:
        return next_node if state["attempt"].status == progress else "reflect"
    return route


def _after_propose(state: LoopState) -> str:
    if state.get("finished"):
        return "conclude"
    return _after(Progress.PENDING, "compile")(state)


def _after_benchmark(state: LoopState, runtime: Runtime[LoopContext]) -> str:
    profiling = runtime.context.profiler is not None
    return "profile" if profiling and state["attempt"].status == Status.OK else "reflect"


def _after_reflect(state: LoopState) -> str:
    return "conclude" if state.get("finished") else "propose"


def _after_plan(state: LoopState) -> str:
    return END if state["iteration"] >= state["budget"] else "propose"


def build_graph() -> StateGraph:
    g = StateGraph(LoopState, context_schema=LoopContext)
    g.add_node("plan", plan)
    g.add_node("propose", propose)
    g.add_node("compile", compile_node)
    g.add_node("validate", validate)
    g.add_node("benchmark", benchmark)
    g.add_node("profile", profile)
    g.add_node("reflect", reflect)
    g.add_node("conclude", conclude)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", _after_plan, ["propose", END])
    g.add_conditional_edges("propose", _after_propose, ["compile", "reflect", "conclude"])
    g.add_conditional_edges("compile", _after(Progress.COMPILED, "validate"), ["validate", "reflect"])
    g.add_conditional_edges("validate", _after(Progress.VALIDATED, "benchmark"), ["benchmark", "reflect"])
    g.add_conditional_edges("benchmark", _after_benchmark, ["profile", "reflect"])
    g.add_edge("profile", "reflect")
    g.add_conditional_edges("reflect", _after_reflect, ["propose", "conclude"])
    g.add_edge("conclude", END)
    return g
