"""Typed progress events the loop streams (LangGraph stream mode "custom") for any
front end: the headless progress bar today, the Textual app next. The loop never
imports a front end; front ends only read these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class NodeStarted:
    node: str
    iteration: int


@dataclass(frozen=True)
class Planned:
    """The plan node's findings: the GPU and, per case, the fastest library's median."""

    gpu: str
    baseline: dict[str, float]
    baseline_score_ms: Optional[float]
    floors: dict[str, float] = field(default_factory=dict)  # case -> its FLOP/byte floor in ms (speed of light)
    ceilings: str = ""  # where the floors' ceilings came from


@dataclass(frozen=True)
class NodeFinished:
    """A node's update reached the checkpoint (LangGraph stream mode "updates")."""

    node: str


@dataclass(frozen=True)
class CandidateProposed:
    iteration: int
    name: str
    proposer: str
    rationale: str
    source: str
    tokens: int = 0
    program: tuple[str, ...] = ()  # a program's workspace and steps, one line each (Program.describe)
    parent: Optional[int] = None  # the attempt it was derived from (0 = the starting kernel), when known
    focus: Optional[str] = None  # the performance case it was searched for (None: all of them)


@dataclass(frozen=True)
class EvaluatorRan:
    """An attempt's validation (phase validate: with the screen and compile before it, or
    the verdict that came instead) or its timing (phase time: with the revalidation and
    the gate) as the evaluator ran it, perhaps ahead of the graph: when it began (epoch s)
    and how long it took; through Ray, how long the session waited for the attempt's call
    too (on the validation's). benchmarks/search_speed.py reads them from the timeline:
    how busy the GPU side was, and what the Ray hop cost."""

    iteration: int
    phase: str
    began_s: Optional[float]
    evaluator_ms: Optional[float]
    call_ms: Optional[float] = None


@dataclass(frozen=True)
class CompileFinished:
    iteration: int
    ok: bool
    compile_ms: float
    resources: str
    log: str
    cached: bool = False  # the CUBIN came from the compile cache (compiled ahead, or before)


@dataclass(frozen=True)
class CaseFinished:
    """One case validated (phase validate / revalidate) or timed (phase time)."""

    iteration: int
    case: str
    phase: str
    status: str
    max_rel_error: Optional[float] = None
    median_ms: Optional[float] = None
    elapsed_ms: Optional[float] = None  # the worker's time on the case: setup, launches, checks


@dataclass(frozen=True)
class AttemptFinished:
    iteration: int
    name: str
    status: str
    score_ms: Optional[float]
    detail: str
    gpu: str = ""  # the GPU it ran on, on Ray ("actor 1: NVIDIA H200 GPU-..."); "" locally


@dataclass(frozen=True)
class Profiled:
    """Nsight Compute's summary of the candidate, one line per performance case."""

    iteration: int
    summaries: tuple[str, ...]
    findings: tuple[str, ...]


@dataclass(frozen=True)
class Notice:
    """One line the user should see (a feature skipped, a fallback taken); the run goes on."""

    text: str


@dataclass(frozen=True)
class NewBest:
    iteration: int
    name: str
    score_ms: float
    speedup_vs_baseline: Optional[float]


@dataclass(frozen=True)
class BudgetChanged:
    old: int
    new: int


@dataclass(frozen=True)
class LimitsChanged:
    limits: str  # the limits now in force, in words


@dataclass(frozen=True)
class SessionFinished:
    reason: str
    best_score_ms: Optional[float]


@dataclass(frozen=True)
class ResultReady:
    """The session's result at its end: what the user gets, per case, against the fastest library."""

    served_by: str  # dispatch | best
    score_ms: float
    speedup: Optional[float]  # geomean over the cases of the fastest library's time over ours
    headline: str
    cases: dict[str, float] = field(default_factory=dict)  # case -> our median ms
