"""What the app shows, folded from the loop's typed events. Pure data: the
widgets render it, tests read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from warpsmith.agent.evaluate.results import Status
from warpsmith.agent.loop import events
from warpsmith.agent.loop.limits import Limits


@dataclass
class CaseRow:
    """One line of the app's case table: the current candidate's figures beside the
    best's, the baseline's and the floor, folded from events as they arrive. A view of
    several records at once, so not one of them (``CaseOutcome``, ``CaseResult``)."""

    case: str
    role: str
    status: str = "-"
    max_rel_error: Optional[float] = None
    median_ms: Optional[float] = None
    best_ms: Optional[float] = None
    baseline_ms: Optional[float] = None
    floor_ms: Optional[float] = None  # the case's speed-of-light floor
    attempts: int = 0  # attempts searched for this case (the tuner's focus on its gap)

    @property
    def best_pct_of_floor(self) -> Optional[float]:
        return self.floor_ms / self.best_ms if self.floor_ms and self.best_ms else None


FRONTIER = 3  # the best attempts the app marks: where the next batch branches from


@dataclass
class AttemptRow:
    """One attempt in the app's tree: what it came from and how it ended."""

    iteration: int
    name: str
    parent: Optional[int] = None
    status: str = "pending"
    score_ms: Optional[float] = None


@dataclass
class RunView:
    workload: str
    proposer: str
    gpu: str = "?"
    state: str = "starting"  # starting | running | pausing | paused | stopping | finished | stopped | failed
    iteration: int = 0
    budget: int = 0
    node: str = ""
    best_ms: Optional[float] = None
    best_name: str = ""
    speedup: Optional[float] = None
    result: Optional[events.ResultReady] = None  # the session's result, once it has ended
    last_status: str = "-"
    source: str = ""  # the current candidate's
    best_source: str = ""
    detail: str = ""  # compile log or mismatch report of the current candidate
    profile: list[str] = field(default_factory=list)  # Nsight Compute on the current candidate (--use-nsight)
    best_profile: list[str] = field(default_factory=list)
    trend: list[float] = field(default_factory=list)  # best score after each iteration
    cases: dict[str, CaseRow] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)  # besides the iteration budget
    attempts: dict[int, AttemptRow] = field(default_factory=dict)  # by iteration: the tree of candidates

    @property
    def frontier(self) -> list[AttemptRow]:
        """The FRONTIER fastest attempts that passed, fastest first."""
        scored = [a for a in self.attempts.values() if a.status == Status.OK and a.score_ms]
        return sorted(scored, key=lambda a: a.score_ms or 0.0)[:FRONTIER]

    def apply(self, e: object) -> None:
        """Fold one event in."""
        if isinstance(e, events.Planned):
            self.gpu = e.gpu
            for case, ms in e.baseline.items():
                if case in self.cases:
                    self.cases[case].baseline_ms = ms
            for case, ms in e.floors.items():
                if case in self.cases:
                    self.cases[case].floor_ms = ms
            if e.ceilings:
                self.log.append(f"% floor from ceilings {e.ceilings}")
        elif isinstance(e, events.NodeStarted):
            self.node = e.node
            if e.node == "propose":
                self.result = None  # a session going on (more budget): its result comes again at its end
                for row in self.cases.values():
                    row.status, row.max_rel_error, row.median_ms = "-", None, None
        elif isinstance(e, events.CandidateProposed):
            # A program's steps above its source, as `warpsmith diff` shows them.
            steps = "".join(f"// {line}\n" for line in e.program)
            self.source, self.detail, self.profile = steps + e.source, "", []
            self.attempts[e.iteration] = AttemptRow(e.iteration, e.name, e.parent)
            if e.focus in self.cases:
                self.cases[e.focus].attempts += 1
            came_from = f" (from #{e.parent})" if e.parent is not None else ""
            self.log.append(f"#{e.iteration} {e.proposer}: {e.name}{came_from} - {e.rationale}")
        elif isinstance(e, events.CompileFinished):
            self.detail = e.log
            self.log.append(f"#{e.iteration} compile {'ok' if e.ok else 'FAILED'} in {e.compile_ms:.0f} ms: {e.resources}")
        elif isinstance(e, events.CaseFinished):
            case_row = self.cases.get(e.case)
            if case_row is not None:
                if e.phase == "time":
                    case_row.median_ms = e.median_ms
                else:
                    case_row.status = e.status if e.phase == "validate" or e.status != Status.OK else case_row.status
                    case_row.max_rel_error = e.max_rel_error
        elif isinstance(e, events.AttemptFinished):
            self.iteration, self.last_status = e.iteration, e.status
            attempt = self.attempts.setdefault(e.iteration, AttemptRow(e.iteration, e.name))
            attempt.status, attempt.score_ms = e.status, e.score_ms
            if e.status != Status.OK and e.detail:
                self.detail = e.detail
            score = f"{e.score_ms:.4f} ms" if e.score_ms else "-"
            on = f" on {e.gpu.split(':')[0]}" if e.gpu else ""  # on Ray: which GPU actor ran it
            self.log.append(f"#{e.iteration} {e.status} {score}{on}")
            if self.best_ms is not None:
                self.trend.append(self.best_ms)
        elif isinstance(e, events.NewBest):
            self.best_ms, self.best_name, self.speedup = e.score_ms, e.name, e.speedup_vs_baseline
            if self.source:
                self.best_source = self.source
            self.best_profile = list(self.profile)
            for row in self.cases.values():
                row.best_ms = row.median_ms
            self.log.append(f"#{e.iteration} new best {e.name}: {e.score_ms:.4f} ms")
        elif isinstance(e, events.Profiled):
            self.profile = list(e.summaries) + ([f"suggests: {'; '.join(e.findings)}"] if e.findings else [])
        elif isinstance(e, events.Notice):
            self.log.append(e.text)
        elif isinstance(e, events.LimitsChanged):
            self.log.append(f"limits: {e.limits}")
        elif isinstance(e, events.BudgetChanged):
            self.budget = e.new
            self.log.append(f"budget {e.old} -> {e.new}")
        elif isinstance(e, events.ResultReady):
            self.result = e
            for case, ms in e.cases.items():
                if case in self.cases:
                    self.cases[case].best_ms = ms
            self.log.append(e.headline)
        elif isinstance(e, events.SessionFinished):
            self.log.append(f"session finished ({e.reason})")
