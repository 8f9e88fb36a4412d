"""When a session stops on its own: besides the iteration budget, wall time, model
tokens, model dollars and patience (iterations without a new best). Kept in the
checkpointed state, so they survive a resume, and changeable while the session
runs or is paused (SessionControl.set_limits, `resume --time-budget ...`).
"""

from __future__ import annotations

from typing import Mapping, Optional

from pydantic import BaseModel, ConfigDict


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True)  # a value: options and checkpoints share it

    time_s: Optional[float] = None  # wall time spent running (paused time does not count)
    tokens: Optional[int] = None  # model tokens, all kinds
    cost_usd: Optional[float] = None  # model dollars, from the price table
    patience: Optional[int] = None  # attempts in a row without a new best

    def merged(self, changes: Mapping[str, Optional[float]]) -> "Limits":
        """`changes` maps a field to a new value; 0 or a negative value removes that limit."""
        values = self.model_dump()
        for k, v in changes.items():
            values[k] = None if v is None or v <= 0 else v
        return Limits(**values)

    def text(self) -> str:
        parts = [f"time {self.time_s:.0f} s" if self.time_s else "", f"tokens {self.tokens}" if self.tokens else "",
                 f"cost ${self.cost_usd:.2f}" if self.cost_usd else "", f"patience {self.patience}" if self.patience else ""]
        return ", ".join(p for p in parts if p) or "none"

    def given(self) -> dict[str, float]:
        """The limits that are set, by field (session.json and MLflow keep only those)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Spent(BaseModel):
    elapsed_s: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0


def stop_reason(iteration: int, budget: int, limits: Optional[Limits], spent: Optional[Spent],
                best_iteration: int) -> Optional[str]:
    """Why no further attempt should start, or None. The reason names the limit."""
    if iteration >= budget:
        return "budget"
    if limits is None or spent is None:
        return None
    if limits.time_s and spent.elapsed_s >= limits.time_s:
        return f"time budget ({spent.elapsed_s:.0f} of {limits.time_s:.0f} s)"
    if limits.tokens and spent.tokens >= limits.tokens:
        return f"token budget ({spent.tokens} of {limits.tokens})"
    if limits.cost_usd and spent.cost_usd >= limits.cost_usd:
        return f"cost budget (${spent.cost_usd:.4f} of ${limits.cost_usd:.2f})"
    if limits.patience and iteration - best_iteration >= limits.patience:
        return f"patience ({iteration - best_iteration} attempts without a new best)"
    return None
