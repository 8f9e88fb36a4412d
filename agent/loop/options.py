"""A session's options as records, built from the command line in one place
(agent/cli/options.py); nothing below the CLI sees argparse.

SearchOptions is what a session searches with; session.json keeps it, in the flat
form sessions have always been stored in, so `resume` (of sessions stored before
these records too) builds the same session. SessionOptions adds how this command
evaluates and tracks: given again by every command, never stored."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from ..evaluate.options import EvaluationOptions
from ..proposers.choice import ProposerChoice
from ..proposers.model_client import without_credentials
from ..tracking.options import TrackingOptions
from .limits import Limits


@dataclass(frozen=True)
class SearchOptions:
    proposer: ProposerChoice = ProposerChoice()
    budget: int = 30  # iterations (repairs count)
    limits: Limits = Limits()  # the limits it started with; a run may change them in its checkpoint
    nsight: bool = False  # --use-nsight
    cases: tuple[str, ...] = ()  # --cases: the performance cases timed (() = all)
    batch: int = 1  # --batch: candidates proposed per step (each its own attempt; the budget counts attempts)
    early_reject: bool = True  # --no-early-reject: time every candidate in full
    overlap: bool = True  # --no-overlap: a step's candidates evaluated one by one as the loop reaches them

    def stored(self) -> dict[str, Any]:
        """session.json's flat form: the proposer's kind under "proposer", its other
        fields beside budget, limits (those set), nsight, cases, batch, early_reject and overlap."""
        choice = {f.name: getattr(self.proposer, f.name) for f in fields(ProposerChoice) if f.name != "kind"}
        # never a secret in the store: a --base-url's user:key@ part is left out (resume then
        # reaches the server without it; the key belongs in OPENAI_API_KEY)
        choice["base_url"] = without_credentials(self.proposer.base_url) if self.proposer.base_url else ""
        return {"proposer": self.proposer.kind, "budget": self.budget, **choice, "nsight": self.nsight,
                "limits": self.limits.given(), "cases": list(self.cases),
                # only when set: a session stored before them saves back unchanged
                **({"batch": self.batch} if self.batch != 1 else {}),
                **({"early_reject": False} if not self.early_reject else {}),
                **({"overlap": False} if not self.overlap else {})}

    @staticmethod
    def from_stored(data: Mapping[str, Any]) -> "SearchOptions":
        """The inverse of stored(); a key a session stored before it existed takes its default."""
        choice = {f.name: data[f.name] for f in fields(ProposerChoice) if f.name in data and f.name != "kind"}
        return SearchOptions(ProposerChoice(kind=data.get("proposer", "tune"), **choice),
                             budget=data.get("budget", SearchOptions.budget), limits=Limits().merged(data.get("limits") or {}),
                             nsight=data.get("nsight", False), cases=tuple(data.get("cases") or ()),
                             batch=data.get("batch", 1), early_reject=data.get("early_reject", True),
                             overlap=data.get("overlap", True))


@dataclass(frozen=True)
class SessionOptions:
    search: SearchOptions  # what a new session searches with (a resumed one keeps its own)
    evaluation: EvaluationOptions = EvaluationOptions()
    tracking: TrackingOptions = TrackingOptions()
