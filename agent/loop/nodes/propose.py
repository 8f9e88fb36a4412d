"""The propose node: the next attempt's candidate, from the step's queue (a batch proposed
at once, or a step proposed ahead in the background) or from the proposer.
"""

from __future__ import annotations

import functools
import time
from dataclasses import replace

from langgraph.runtime import Runtime

from ...evaluate.ahead import AttemptScheduler
from ...evaluate.records import Attempt, CandidateSpec
from ...evaluate.results import Progress, Status
from ...proposers.base import Proposal, ProposalContext, ProposalError, SearchExhausted, propose_step, proposes_ahead
from ...runtime.device_facts import DeviceFacts
from ...spec.expr import ExprError
from .. import events
from ..context import LoopContext
from ..state import LoopState, StateUpdate
from .budget import apply_budget, stop_reason_after
from .outcomes import attempt_job


def program_lines(spec: CandidateSpec) -> tuple[str, ...]:
    """A program's lines for the app; nothing for one launch or a malformed program (the
    evaluate node reports that one)."""
    try:
        program = spec.to_candidate().program if spec.program else None
    except ValueError:
        return ()
    return tuple(program.describe()) if program else ()


def propose(state: LoopState, runtime: Runtime[LoopContext]) -> StateUpdate:
    ctx = runtime.context
    update = apply_budget(state, runtime)
    reason = stop_reason_after(state, update, state["iteration"])
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
            if isinstance(ctx.evaluator, AttemptScheduler):
                _submit_ahead(ctx, state, batch, iteration, budget)
            runtime.stream_writer(events.Notice(f"step of {len(batch)} candidates: attempts {iteration}-"
                                                f"{iteration + len(batch) - 1}"))
    spec = proposal.spec
    if proposal.notice:
        runtime.stream_writer(events.Notice(proposal.notice))
    runtime.stream_writer(events.CandidateProposed(iteration, spec.name, spec.proposer or ctx.proposer.name,
                                                   spec.rationale, spec.source, proposal.tokens, program_lines(spec),
                                                   spec.parent, spec.focus))
    attempt = Attempt(iteration=iteration, name=spec.name, kernel=spec.kernel, tag=spec.tag,
                      proposer=spec.proposer or ctx.proposer.name,
                      status=Progress.PENDING, defines=spec.defines, tokens=proposal.tokens, cost_usd=proposal.cost_usd,
                      sources=list(proposal.sources), parent=spec.parent, focus=spec.focus)
    return {**update, "pending": spec, "attempt": attempt, "attempt_started": started}


def _looks_ahead(ctx: LoopContext) -> bool:
    return ctx.batch > 1 and isinstance(ctx.evaluator, AttemptScheduler) and proposes_ahead(ctx.proposer)


def _take_ahead(runtime: Runtime[LoopContext], state: LoopState, batch: list[Proposal], first: int,
                budget: int) -> list[CandidateSpec]:
    """A step proposed in the background (agent/loop/proposals_ahead.py), its first attempt
    `first`: into the queue, and to the GPU behind what is there (as much as the budget
    has room for)."""
    if not batch:
        return []
    ctx = runtime.context
    _submit_ahead(ctx, state, batch, first, budget)
    runtime.stream_writer(events.Notice(f"next step of {len(batch)} candidates proposed ahead: attempts {first}-"
                                        f"{first + len(batch) - 1}"))
    return [p.spec for p in batch]


def _submit_ahead(ctx: LoopContext, state: LoopState, batch: list[Proposal], first: int, budget: int) -> None:
    """The step's candidates, attempts `first` on, as many as the budget has room for, to the
    GPU ahead of the graph (agent/evaluate/ahead.py) as jobs filed under their attempts'
    numbers; one whose launch rule does not parse is left to the evaluate node, which
    reports it."""
    assert isinstance(ctx.evaluator, AttemptScheduler)
    jobs = []
    for i, p in enumerate(batch[:max(0, budget - first + 1)]):
        try:
            jobs.append(attempt_job(ctx, state, p.spec.to_candidate(), first + i))
        except (ExprError, ValueError):
            continue
    ctx.evaluator.submit(jobs)
