"""The loop's state, as LangGraph checkpoints it: the records of evaluate.records plus
the budget, limits and spending, so a session survives a crash and resumes from its last step."""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict

from ..evaluate.dispatch import CaseWinner, Dispatch
from ..evaluate.records import Attempt, Best, CandidateSpec
from ..evaluate.session_result import LibraryTime, SessionResult
from .legacy_names import LEGACY_TYPES
from .limits import Limits, Spent


class LoopState(TypedDict, total=False):
    iteration: int  # attempts made so far (repairs count)
    budget: int
    mode: Literal["optimise", "repair"]
    pending: Optional[CandidateSpec]
    queued: list[CandidateSpec]  # the rest of the step's batch, each evaluated as its own attempt
    attempt: Optional[Attempt]  # the one in flight
    history: list[Attempt]
    best: Optional[Best]
    start: Optional[Best]  # the starting kernel, for the report
    baseline: dict[str, float]  # case -> baseline median ms
    baseline_score_ms: Optional[float]
    facts: dict[str, int | float | str]  # DeviceFacts.to_dict(): stored as the plain dict it always was
    finished: Optional[str]  # why the session ended
    limits: Limits  # time, tokens, dollars, patience (the iteration budget is `budget`)
    spent: Spent
    attempt_started: float  # time.time() when the attempt in flight was proposed
    winners: dict[str, CaseWinner]  # performance case -> the fastest passing attempt on it
    dispatch: Optional[Dispatch]  # a variant per shape, built when the session ends
    libraries: dict[str, LibraryTime]  # performance case -> the fastest library there, timed in the plan
    result: Optional[SessionResult]  # what the user gets: the dispatch where it pays, else the best


StateUpdate = dict[str, Any]  # what a node changes in the state (LangGraph merges it in)


def attempt_in_flight(state: LoopState) -> Attempt:
    """The attempt the propose node began: there for every node after it."""
    attempt = state["attempt"]
    assert attempt is not None, "no attempt in flight"
    return attempt


def candidate_in_flight(state: LoopState) -> CandidateSpec:
    """The candidate of the attempt in flight, past the propose node (a proposal that failed
    goes straight to reflect without one)."""
    spec = state["pending"]
    assert spec is not None, "no candidate in flight"
    return spec


# what the checkpointer may rebuild: today's records, and the names stored before the
# split into subpackages (see legacy_names)
STATE_TYPES = [("warpsmith.agent.evaluate.records", n) for n in ("CandidateSpec", "CaseOutcome", "CaseProfile", "Attempt", "Best")] + \
    [("warpsmith.agent.evaluate.dispatch", n) for n in ("CaseWinner", "Dispatch", "DispatchEntry")] + \
    [("warpsmith.agent.evaluate.session_result", n) for n in ("LibraryTime", "CaseServed", "SessionResult")] + \
    [("warpsmith.agent.loop.limits", n) for n in ("Limits", "Spent")] + \
    [("warpsmith.agent.worker.status", n) for n in ("Status", "Progress")] + LEGACY_TYPES
