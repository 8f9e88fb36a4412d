"""Quit while a run is active? The answer is a bool."""

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmQuit(ModalScreen[bool]):
    CSS_PATH = "budget.tcss"
    BINDINGS = [("escape", "no", "No"), ("y", "yes", "Yes")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("A run is active. Stop it now and quit?\n"
                        "(checkpoint kept, MLflow run KILLED, best kernel saved; resumable)")
            with Horizontal():
                yield Button("Stop and quit", variant="error", id="yes")
                yield Button("Keep running", id="no")

    @on(Button.Pressed, "#yes")
    def action_yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def action_no(self) -> None:
        self.dismiss(False)
