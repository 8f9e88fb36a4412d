"""The loop's state, as LangGraph checkpoints it: the records of evaluate.records plus
the budget, limits and spending, so a session survives a crash and resumes from its last step."""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict

from ..evaluate.dispatch import CaseWinner, Dispatch, DispatchEntry
from ..evaluate.records import Attempt, Best, CandidateSpec, CaseOutcome, CaseProfile
from ..evaluate.results import Progress, Status
from ..evaluate.session_result import CaseServed, LibraryTime, SessionResult
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


# What the checkpointer may rebuild, each named by its tag (checkpoint_tags), never by its
# module: a tag stays when its type moves. Stores from before the tags: legacy_names.
STATE_TAGS: dict[str, type] = {
    "warpsmith/CandidateSpec": CandidateSpec, "warpsmith/CaseOutcome": CaseOutcome,
    "warpsmith/CaseProfile": CaseProfile, "warpsmith/Attempt": Attempt, "warpsmith/Best": Best,
    "warpsmith/CaseWinner": CaseWinner, "warpsmith/Dispatch": Dispatch, "warpsmith/DispatchEntry": DispatchEntry,
    "warpsmith/LibraryTime": LibraryTime, "warpsmith/CaseServed": CaseServed, "warpsmith/SessionResult": SessionResult,
    "warpsmith/Limits": Limits, "warpsmith/Spent": Spent,
    "warpsmith/Status": Status, "warpsmith/Progress": Progress,
}
