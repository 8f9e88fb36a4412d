"""Best-so-far score over iterations."""

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline

from ..run_view import RunView


class Trend(Vertical):
    def compose(self) -> ComposeResult:
        yield Label("best score (ms) by iteration", id="trend-label")
        yield Sparkline([], id="trend-line")

    def show(self, v: RunView) -> None:
        # Lower is better: plot the speed-up over the first best so the line rises.
        first = v.trend[0] if v.trend else None
        self.query_one(Sparkline).data = [first / x for x in v.trend] if first else []
        if v.trend:
            self.query_one(Label).update(f"best score: {v.trend[0]:.4f} → {v.trend[-1]:.4f} ms "
                                         f"over {len(v.trend)} iterations")
