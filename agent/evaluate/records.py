"""What an attempt was and what it scored: plain pydantic records (the proposer's
candidate, each case's outcome and profile, the attempt, the best). The loop
checkpoints them; tracking, profiling and the proposers read them."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..spec.candidate import Candidate
from ..spec.expr import Expr
from ..spec.launch import LaunchRule, Program, xyz
from ..worker.status import Progress, Status


def legacy_identity(data: Any) -> Any:
    """A record written before kernel and tag were fields names them only in its name
    ("kernel@tag[K=V,...]", the tuner's form; any other name is its own kernel): read once
    from there, where the record is loaded. New records carry both fields."""
    if isinstance(data, dict) and "kernel" not in data and isinstance(data.get("name"), str):
        kernel, _, rest = data["name"].partition("@")
        data = {**data, "kernel": kernel, "tag": rest.partition("[")[0]}
    return data


class CandidateSpec(BaseModel):
    """A proposed kernel as data: CUDA source and launch arithmetic as text, never Python;
    what checkpoints, MLflow and the proposers hold. Evaluation takes the parsed form,
    ``Candidate`` (agent/spec/candidate.py, which says why there are two). Per-case launch
    rules (``Candidate.case_launch``) are not stored yet: nothing proposes them."""

    model_config = ConfigDict(frozen=True)  # a record: the checkpoint stores it once (agent/loop/checkpoint_serde.py)

    name: str  # for people: the kernel, tag and knob values ("tf32x3@1a2b3c4d[BM=128]"), never parsed
    source: str
    entry: str
    grid: list[str] = Field(min_length=1, max_length=3)
    block: list[str] = Field(min_length=1, max_length=3)
    shared: str = "0"
    options: list[str] = []
    defines: dict[str, int] = {}
    rationale: str = ""
    proposer: str = ""

    # A program (agent/spec/launch.py): {"workspace": [...], "steps": [...]}; grid/block/entry are then its first launch's
    program: Optional[dict[str, Any]] = None
    parent: Optional[int] = None  # the attempt (iteration; 0 = the starting kernel) this one was derived from
    focus: Optional[str] = None  # the performance case it was searched for (None: the geomean of them all)
    # Its identity: the kernel it is a configuration of (its own name for a kernel nothing
    # configures) and, for a tuned configuration, the hash of that kernel's source (the
    # tuner's attempts on one kernel share both; agent/proposers/tune_target.py).
    kernel: str = ""
    tag: str = ""

    _legacy = model_validator(mode="before")(legacy_identity)

    def to_candidate(self) -> Candidate:
        """Raises ExprError (a ValueError) if the launch arithmetic is not whitelisted or the program is malformed."""
        def pad(dims: list[str]) -> tuple[Expr, Expr, Expr]:
            return xyz([Expr.parse(d) for d in (dims + ["1"] * 3)[:3]])
        program = Program.from_data(self.program.get("steps"), self.program.get("workspace", [])) \
            if self.program is not None else None
        return Candidate(self.source, self.entry, LaunchRule(pad(self.grid), pad(self.block), Expr.parse(self.shared)),
                         tuple(self.options), dict(self.defines), self.name, program=program)

    @staticmethod
    def from_candidate(c: Candidate, proposer: str, rationale: str = "") -> "CandidateSpec":
        r = c.launch
        return CandidateSpec(name=c.name, kernel=c.name, source=c.source, entry=c.entry, grid=[str(e) for e in r.grid],
                             block=[str(e) for e in r.block], shared=str(r.shared), options=list(c.options),
                             defines=dict(c.defines), rationale=rationale, proposer=proposer,
                             program=c.program.to_data() if c.program else None)


class CaseOutcome(BaseModel):
    """One case of an attempt as the session keeps it: the figures the proposer, the report
    and MLflow read, plus where it stands against the speed-of-light floor. Distilled from
    the evaluator's ``CaseResult`` (agent/evaluate/results.py), which stays apart: that one
    is filled in reply by reply and holds every timing sample and mismatch report, too
    much to checkpoint for each attempt of a session."""

    case: str
    role: str
    status: Status | Progress
    max_rel_error: Optional[float] = None
    median_ms: Optional[float] = None
    cv: Optional[float] = None
    pct_of_floor: Optional[float] = None  # the case's FLOP/byte floor over its median; 1.0 = at the limit
    suspect: bool = False  # faster than the floor: a timing or validation hole until proven otherwise
    clocks_mhz: list[int] = []  # SM, memory before timing; SM, memory after (NVML; empty without it)


class CaseProfile(BaseModel):
    """Nsight Compute's view of one launch on one case (--use-nsight)."""

    case: str
    summary: str  # one line: throughput, DRAM bytes, hit rates, occupancy and its limiter, stalls
    findings: list[str] = []  # what the numbers suggest ("memory bound: ...")
    metrics: dict[str, float] = {}


class Attempt(BaseModel):
    """One iteration's outcome, compact enough to go back to the proposer."""

    model_config = ConfigDict(frozen=True)  # a record: the checkpoint stores it once (agent/loop/checkpoint_serde.py)

    iteration: int
    name: str
    proposer: str
    status: Status | Progress  # a verdict (proposal_invalid too), or how far it got (pending, compiled, validated)
    score_ms: Optional[float] = None
    detail: str = ""  # the failure, verbatim (compile log, mismatch report, crash)
    defines: dict[str, int] = {}
    cases: list[CaseOutcome] = []
    new_best: bool = False
    tokens: int = 0
    cost_usd: float = 0.0
    profile: list[CaseProfile] = []
    sources: list[str] = []  # guidance cited in the prompt (--nvidia-research)
    parent: Optional[int] = None  # the attempt it was derived from (0 = the starting kernel), when known
    gpu: str = ""  # the GPU it was validated and timed on (EvaluationResult.gpu), when known
    focus: Optional[str] = None  # the performance case it was searched for (CandidateSpec.focus)
    kernel: str = ""  # CandidateSpec.kernel
    tag: str = ""  # CandidateSpec.tag

    _legacy = model_validator(mode="before")(legacy_identity)

    @property
    def suspect(self) -> bool:
        return any(c.suspect for c in self.cases)


class Best(BaseModel):
    model_config = ConfigDict(frozen=True)  # a record: the checkpoint stores it once (agent/loop/checkpoint_serde.py)

    spec: CandidateSpec
    score_ms: float
    cases: list[CaseOutcome]
    iteration: int
    profile: list[CaseProfile] = []


class AttemptSamples(BaseModel):
    """An attempt's timing samples as the session archives them (attempts/NNN/samples.json),
    with the best score it was timed against: what the early-rejection rule is replayed on."""

    iteration: int
    status: Status | Progress
    best_ms: Optional[float] = None  # the best score when it was timed (None: no best yet)
    # each performance case's fastest median when it was timed (the dispatch's winners);
    # None in sessions recorded before the per-case rule
    case_best_ms: Optional[dict[str, float]] = None
    cases: dict[str, list[float]] = {}  # every sample, in launch order, per timed case
    screen: dict[str, list[float]] = {}  # a kept candidate's screen samples (EvaluationResult.screen_ms)
