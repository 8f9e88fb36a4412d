"""Past runs from MLflow: a table of sessions; the selected one's best kernel,
report and best-score trend; resume it from here."""

from __future__ import annotations

import datetime
from typing import Callable, Optional

from rich.syntax import Syntax
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, Markdown, Sparkline, Static

from warpsmith.agent.spec.visible_text import visible
from warpsmith.agent.tracking.past_runs import PastRun, RunsSource


def when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M")


class RunsScreen(Screen[None]):
    CSS_PATH = "runs.tcss"
    BINDINGS = [("escape", "app.pop_screen", "Back"), ("R", "resume", "Resume selected")]

    def __init__(self, source: RunsSource, on_resume: Optional[Callable[[str], None]] = None):
        super().__init__()
        self.source, self.on_resume = source, on_resume
        self.rows: list[PastRun] = []

    def compose(self) -> ComposeResult:
        yield Label("Past runs (MLflow)", id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row")
        with Horizontal(id="runs-detail"):
            yield VerticalScroll(Static(id="runs-kernel"), id="runs-kernel-box")
            with VerticalScroll(id="runs-side"):
                yield Markdown(id="runs-report", open_links=False)  # a report quotes model text: no link opens
                yield Sparkline([], id="runs-trend")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("date", "workload", "proposer", "result ms", "vs library", "status", "session")
        self.rows = self.source.runs()
        for r in self.rows:
            table.add_row(when(r.started), r.workload, r.proposer, "-" if r.best_ms is None else f"{r.best_ms:.4f}",
                          "-" if r.speedup is None else f"{r.speedup:.2f}x", r.status, r.session)
        if self.rows:
            self.show(self.rows[0])

    @on(DataTable.RowHighlighted)
    def highlighted(self, event: DataTable.RowHighlighted) -> None:
        if 0 <= event.cursor_row < len(self.rows):
            self.show(self.rows[event.cursor_row])

    def show(self, run: PastRun) -> None:
        self.query_one("#runs-kernel", Static).update(Syntax(visible(self.source.best_kernel(run)), "cuda",
                                                             line_numbers=True))
        self.query_one(Markdown).update(self.source.report(run))
        trend = self.source.trend(run)
        self.query_one(Sparkline).data = [trend[0] / x for x in trend] if trend else []

    def action_resume(self) -> None:
        table = self.query_one(DataTable)
        if self.on_resume and 0 <= table.cursor_row < len(self.rows):
            self.on_resume(self.rows[table.cursor_row].session)
