"""The review of a model-drafted reference: its code and the cases it will judge,
and the user's answer. Nothing of the draft runs before a yes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.syntax import Syntax
from textual import on
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Label, Static

if TYPE_CHECKING:
    from warpsmith.agent.spec.workload_model import Workload


class ReviewScreen(Screen[bool]):
    CSS_PATH = "review.tcss"
    BINDINGS = [("y", "yes", "Trust and check"), ("n", "no", "Not now"), ("escape", "no", "Not now")]

    def __init__(self, workload: Workload, question: str):
        super().__init__()
        self.workload, self.question = workload, question

    def compose(self) -> ComposeResult:
        w = self.workload
        with Vertical():
            yield Label(f"{w.name}: the reference is a model's draft. {self.question}", id="question")
            with Horizontal(id="panes"):
                with VerticalScroll(id="reference"):
                    yield Static(Syntax(w.reference_path.read_text(), "python", line_numbers=True))
                with VerticalScroll(id="cases"):
                    yield Static("\n".join(f"{c.name} ({c.role})\n  " + ", ".join(f"{k}={v}" for k, v in c.sizes.items())
                                           for c in w.cases), markup=False)
            yield Label("Yes: a second, independent reference is drafted and both run on the same inputs "
                        "in a time-limited process. No: nothing runs; the workload stays drafted.", id="what-next")
            with Horizontal(id="buttons"):
                yield Button("Trust and check (y)", variant="primary", id="yes")
                yield Button("Not now (n)", id="no")
        yield Footer()

    @on(Button.Pressed, "#yes")
    def action_yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def action_no(self) -> None:
        self.dismiss(False)


class ReviewApp(App[bool]):
    """Just the review screen: `warpsmith new` / `review` in a terminal, without --yes."""

    def __init__(self, workload: Workload, question: str):
        super().__init__()
        self.workload, self.question = workload, question

    def on_mount(self) -> None:
        self.push_screen(ReviewScreen(self.workload, self.question), self.exit)
