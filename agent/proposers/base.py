"""The proposer interface and what a proposer sees."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, runtime_checkable

from ..evaluate.records import Attempt, Best, CandidateSpec
from ..runtime.device_facts import DeviceFacts
from ..spec.workload_model import Workload


class ProposalError(RuntimeError):
    """The proposer produced nothing usable (garbage from a model, an exhausted
    search space). It becomes a failed attempt, never a crash. `tokens`: what
    the failed call still cost."""

    def __init__(self, message: str, tokens: int = 0, cost_usd: float = 0.0):
        super().__init__(message)
        self.tokens, self.cost_usd = tokens, cost_usd


class SearchExhausted(ProposalError):
    """Every configuration the proposer can make has been tried: the session ends
    (with this as its reason) instead of spending its budget on empty attempts."""


@dataclass(frozen=True)
class ProposalContext:
    workload: Workload
    facts: DeviceFacts
    iteration: int
    mode: str  # optimise | repair
    history: list[Attempt]
    best: Optional[Best]
    last: Optional[Attempt]
    baseline: dict[str, float] = field(default_factory=dict)
    stopping: Callable[[], bool] = lambda: False  # "stop now" asked: abandon a model call (SessionControl)
    hint: str = ""  # the optimisation idea this proposal should try (one per call of a batch)
    # Proposed already and not in the history yet (a step proposed ahead of the last one's
    # results, agent/loop/nodes/propose.py): not to be proposed again.
    in_flight: tuple[CandidateSpec, ...] = ()


@dataclass(frozen=True)
class Proposal:
    spec: CandidateSpec
    tokens: int = 0
    sources: tuple[str, ...] = ()  # citations of the guidance the prompt carried (--nvidia-research)
    notice: str = ""  # one line for the user (e.g. web search unavailable)
    cost_usd: float = 0.0  # what the model calls behind this proposal cost


class Proposer(Protocol):
    name: str

    def propose(self, ctx: ProposalContext) -> Proposal: ...


@runtime_checkable
class BatchProposer(Protocol):
    """A proposer that proposes several children per step (tune: neighbours of the top-k;
    llm: parallel calls, each from a parent and a different idea)."""

    name: str

    def propose(self, ctx: ProposalContext) -> Proposal: ...

    def propose_batch(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        """One to `n` proposals, each to be evaluated as its own attempt."""
        ...


def prepare(proposer: Proposer, ctx: ProposalContext) -> None:
    """Let a proposer start what needs no result while the plan runs the baselines and the
    starting kernel (the tuner: compiling its first points); nothing for one that has no
    `prepare`. Never raises: a failure here shows again, with its message, at the first
    proposal."""
    start = getattr(proposer, "prepare", None)
    if start is not None:
        try:
            start(ctx)
        except Exception:  # noqa: BLE001 - the first proposal meets (and reports) the same problem
            pass


def proposes_ahead(proposer: Proposer) -> bool:
    """Whether the loop may ask for the next step before this one's results are all in.
    The tuner: yes (free, and it reads whatever history there is). The model: no, each
    call costs money and its proposal is meant to answer the results it was shown."""
    return bool(getattr(proposer, "proposes_ahead", False))


def propose_step(proposer: Proposer, ctx: ProposalContext, n: int) -> list[Proposal]:
    """A step's proposals: a batch from a proposer that makes them, else one."""
    if n > 1 and isinstance(proposer, BatchProposer):
        return proposer.propose_batch(ctx, n)
    return [proposer.propose(ctx)]
