"""The LangGraph nodes with the active one lit, and the state's key fields."""

from rich.text import Text
from textual.widgets import Static

from agent.loop.graph import NODES

from ..run_view import RunView


class GraphView(Static):
    def show(self, v: RunView) -> None:
        t = Text()
        for i, node in enumerate(NODES):
            if i:
                t.append(" → ", "dim")
            t.append(f" {node} ", "bold black on green" if node == v.node and v.state in ("running", "pausing", "stopping") else "")
        t.append("\n")
        best = f"{v.best_ms:.4f} ms ({v.best_name})" if v.best_ms is not None else "-"
        t.append(f"iteration {v.iteration}/{v.budget}   last status {v.last_status}   best {best}", "dim")
        self.update(t)
