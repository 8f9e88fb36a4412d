"""The plan node: the GPU's facts, every library timed once, the starting kernel evaluated
(the first best), and the first step's compiles and references started meanwhile.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ...evaluate.dispatch import update_winners
from ...evaluate.evaluator import FRESH_SEED
from ...evaluate.records import Best, CandidateSpec
from ...evaluate.session_result import fastest_libraries
from ...evaluate.stats import geomean
from ...proposers.base import ProposalContext, prepare
from ...spec.candidate import Candidate
from ...spec.reference_run import REFERENCE_TIMEOUT_S
from ...spec.references import prefetch_references
from ...spec.speed_of_light import case_floor
from ...worker.footprint import check_memory
from .. import events
from ..context import LoopContext
from ..state import LoopState, StateUpdate
from .outcomes import medians, outcomes
from .streaming import case_events


def plan(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    ctx = runtime.context
    runtime.stream_writer(events.NodeStarted("plan", 0))
    ev, w = ctx.evaluator, ctx.workload
    facts = ev.facts
    check_memory(w, gpu_bytes=facts.total_memory or None, host=False)  # every case fits this GPU, or one line
    on_event = case_events(runtime, 0)
    # The fresh seed's references, computed while the baseline and the starting kernel run:
    # the first new best's check on fresh inputs then does not wait for them.
    prefetch_references(w, FRESH_SEED, getattr(ev, "reference_timeout_s", REFERENCE_TIMEOUT_S))  # --reference-timeout
    # And the first step's compiles, while the baselines and the starting kernel keep the GPU busy.
    prepare(ctx.proposer, ProposalContext(w, facts, 1, state.get("mode", "optimise"), state.get("history", []),
                                          None, None, {}, lambda: ctx.control.stopping_now))
    # Every library, timed once: per case the fastest is what the session is measured against.
    libraries = fastest_libraries(ev, on_event)
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
        r = ev.evaluate(spec.to_candidate(), on_event=on_event)
        # A starting kernel that does not apply to every performance case has no score to be
        # the best with; the cases it serves still seed the dispatch's winners.
        start = Best(spec=spec, score_ms=r.score_ms, cases=outcomes(r, w, ceilings), iteration=0) \
            if r.ok and r.score_ms is not None else None
    if start:
        runtime.stream_writer(events.NewBest(0, spec.name, start.score_ms,
                                             baseline_score / start.score_ms if baseline_score else None))
    ctx.tracker.log_plan(facts, baseline, baseline_score, start, r)
    winners = update_winners({}, 0, spec, medians(outcomes(r, w, ceilings))) if r is not None and r.ok else {}
    return {"facts": facts.to_dict(), "baseline": baseline, "baseline_score_ms": baseline_score,
            "libraries": libraries, "start": start,
            "best": start, "iteration": state.get("iteration", 0), "history": state.get("history", []),
            "mode": "optimise", "finished": None, "winners": winners}
