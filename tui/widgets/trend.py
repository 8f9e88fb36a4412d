"""Best-so-far score over iterations."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Label, Sparkline

from ..run_view import RunView


class Trend(Vertical):
    points: reactive[tuple[float, ...]] = reactive((), repaint=False)  # the best score after each iteration

    def compose(self) -> ComposeResult:
        yield Label("best score (ms) by iteration", id="trend-label")
        yield Sparkline([], id="trend-line")

    def show(self, v: RunView) -> None:
        self.points = tuple(v.trend)

    def watch_points(self, points: tuple[float, ...]) -> None:
        # Lower is better: plot the speed-up over the first best so the line rises.
        first = points[0] if points else None
        self.query_one(Sparkline).data = [first / x for x in points] if first else []
        if points:
            self.query_one(Label).update(f"best score: {points[0]:.4f} → {points[-1]:.4f} ms "
                                         f"over {len(points)} iterations")
