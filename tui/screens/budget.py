"""The budget dialog: the iteration budget and the other limits (time, tokens,
dollars, patience); changes take effect at once, running or paused. An empty
limit field means no limit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from warpsmith.agent.loop.limits import Limits

# Input id, label, Limits field, number type.
LIMIT_FIELDS = (("time", "time budget, seconds", "time_s", float), ("tokens", "token budget", "tokens", int),
                ("cost", "cost budget, USD", "cost_usd", float), ("patience", "patience, attempts", "patience", int))


@dataclass(frozen=True)
class BudgetChange:
    iterations: int
    limits: Mapping[str, Optional[float]] = field(default_factory=dict)  # Limits field -> value (0: none); only the changed ones


class BudgetScreen(ModalScreen[Optional[BudgetChange]]):
    CSS_PATH = "budget.tcss"
    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, current: int, done: int, limits: Optional[Limits] = None):
        super().__init__()
        self.current, self.done, self.limits = current, done, limits or Limits()

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(f"Iteration budget (now {self.current}, {self.done} done)")
            yield Input(str(self.current), type="integer", id="budget-input", select_on_focus=True)
            for key, label, name, kind in LIMIT_FIELDS:
                value = getattr(self.limits, name)
                with Horizontal(classes="limit"):
                    yield Label(label)
                    text = "" if value is None else str(int(value)) if kind is int else repr(float(value))
                    yield Input(text, type="integer" if kind is int else "number",
                                id=f"limit-{key}", placeholder="none")
            yield Label("", id="budget-error")
            with Horizontal(id="buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")

    @on(Input.Submitted)
    @on(Button.Pressed, "#apply")
    def apply(self) -> None:
        text = self.query_one("#budget-input", Input).value.strip()
        if not text.isdigit():
            self.query_one("#budget-error", Label).update("the iteration budget: a whole number, please")
            return
        changes = {}
        for key, label, name, kind in LIMIT_FIELDS:
            raw = self.query_one(f"#limit-{key}", Input).value.strip()
            try:
                value = kind(raw) if raw else 0
            except ValueError:
                self.query_one("#budget-error", Label).update(f"{label}: a number, or empty for none")
                return
            if (getattr(self.limits, name) or 0) != value:
                changes[name] = value
        self.dismiss(BudgetChange(int(text), changes))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
