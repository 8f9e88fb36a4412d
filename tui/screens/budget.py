"""The budget dialog: a number field; the new budget takes effect at once."""

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label


class BudgetScreen(ModalScreen[int | None]):
    CSS_PATH = "budget.tcss"
    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, current: int, done: int):
        super().__init__()
        self.current, self.done = current, done

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(f"Iteration budget (now {self.current}, {self.done} done)")
            yield Input(str(self.current), type="integer", id="budget-input", select_on_focus=True)
            yield Label("", id="budget-error")
            with Horizontal():
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")

    @on(Input.Submitted)
    @on(Button.Pressed, "#apply")
    def apply(self) -> None:
        text = self.query_one(Input).value.strip()
        if not text.isdigit():
            self.query_one("#budget-error", Label).update("a whole number, please")
            return
        self.dismiss(int(text))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
