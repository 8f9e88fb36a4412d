"""Statuses as types: the verdict on a case or a candidate, and the progress of an
attempt through the graph, kept apart. Both are ``StrEnum``: a member *is* its text,
so JSON, MLflow params, events and checkpoints read and write exactly the strings they
always did ("ok", "wrong_answer", "pending"...), and a string read back from an old
session compares equal to its member.

They live here, under the worker, because the worker is the lowest layer that gives a
verdict (a ``CaseCheck``); ``warpsmith.agent.evaluate.results`` re-exports them."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A verdict, roughly in the order it is met (see warpsmith.agent.evaluate.results)."""

    OK = "ok"
    COMPILE_FAILED = "compile_failed"
    LAUNCH_INVALID = "launch_invalid"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    OUT_OF_BOUNDS = "out_of_bounds"
    INPUT_MODIFIED = "input_modified"
    REFERENCE_MODIFIED = "reference_modified"
    WRONG_ANSWER = "wrong_answer"
    UNSTABLE = "unstable"
    BELOW_FLOOR = "below_floor"
    PROPOSAL_INVALID = "proposal_invalid"  # the proposer's answer was not a candidate (an attempt's, never a case's)
    # Correct, but its first timed launches were clearly slower than the best: timing stopped
    # (agent/evaluate/early_reject.py). Not a failure: the search goes on optimising, never repairing.
    REJECTED_EARLY = "rejected_early"
    # A case's, never a candidate's: the kernel cannot serve this case (its launch, a program's
    # workspace or the GPU's limits rule it out there). Not run and not a failure: the session's
    # dispatch serves the case with another variant.
    NOT_APPLICABLE = "not_applicable"


class Progress(StrEnum):
    """Where an attempt or a case is before it has a verdict; the graph routes on these."""

    PENDING = "pending"  # proposed, or a case not run yet
    # Where an attempt stood between the compile, validate and benchmark nodes of the graph
    # before evaluate ran it whole: read back from sessions stored then (agent/loop/legacy_nodes.py).
    COMPILED = "compiled"
    VALIDATED = "validated"


# what an evaluation can end in that is wrong, other than ok (the proposer's own failure is not the
# evaluator's; a candidate rejected early was slow, and right on every launch it was timed for,
# though not known to be correct: screened before validation, its correctness cases never ran)
FAILURES: tuple[Status, ...] = tuple(s for s in Status if s not in (Status.OK, Status.PROPOSAL_INVALID,
                                                                    Status.REJECTED_EARLY, Status.NOT_APPLICABLE))
