"""The header line: workload, proposer, GPU, iteration / budget, state, best."""

from rich.text import Text
from textual.widgets import Static

from ..run_view import RunView

STATE_STYLE = {"running": "bold green", "pausing": "bold yellow", "paused": "bold yellow",
               "stopping": "bold yellow", "finished": "bold cyan", "stopped": "bold red", "failed": "bold red"}


class StatusBar(Static):
    def show(self, v: RunView) -> None:
        t = Text()
        t.append(f" {v.workload} ", "bold reverse")
        t.append(f"  {v.proposer}  ·  {v.gpu}  ·  iteration {v.iteration} / {v.budget}  ·  ")
        t.append(v.state, STATE_STYLE.get(v.state, "bold"))
        if v.best_ms is not None:
            t.append(f"  ·  best {v.best_ms:.4f} ms")
            if v.speedup:
                t.append(f" ({v.speedup:.2f}x baseline)", "bold")
        self.update(t)
