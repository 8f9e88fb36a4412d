"""The LangGraph nodes with the active one lit, and the state's key fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from warpsmith.agent.loop.graph import NODES

from ..run_view import RunView

LIT_IN = ("running", "pausing", "stopping")  # the states in which the running node is lit


@dataclass(frozen=True)
class GraphLine:
    lit: str  # the node running now, "" when none is
    iteration: int
    budget: int
    last_status: str
    best_ms: Optional[float]
    best_name: str


class GraphView(Static):
    line: reactive[Optional[GraphLine]] = reactive(None, repaint=False)

    def show(self, v: RunView) -> None:
        self.line = GraphLine(v.node if v.state in LIT_IN else "", v.iteration, v.budget, v.last_status,
                              v.best_ms, v.best_name)

    def watch_line(self, g: Optional[GraphLine]) -> None:
        if g is None:
            return
        t = Text()
        for i, node in enumerate(NODES):
            if i:
                t.append(" → ", "dim")
            t.append(f" {node} ", "bold black on green" if node == g.lit else "")
        t.append("\n")
        best = f"{g.best_ms:.4f} ms ({g.best_name})" if g.best_ms is not None else "-"
        t.append(f"iteration {g.iteration}/{g.budget}   last status {g.last_status}   best {best}", "dim")
        self.update(t)
