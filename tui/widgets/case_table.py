"""Per case: role, status, the best's speed-up against the fastest library, how close it is
to the case's speed-of-light floor (floor: the floor over the best median, 100% = at the
limit), the attempts searched for the case (tries), then max error and the candidate /
best / baseline medians.
A finished case changes its own row's cells; the table is rebuilt only for another set of cases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import DataTable

from warpsmith.agent.spec.timing_policy import SUSPECT_MARGIN
from warpsmith.agent.spec.visible_text import visible

from ..run_view import CaseRow, RunView

# The case's standing first (against the fastest library, against the floor, attempts spent
# on it), then the figures behind it: a narrow terminal cuts the right-hand columns.
COLUMNS = ("case", "role", "status", "vs base", "floor", "tries", "max err", "cand ms", "best ms", "base ms")


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4f}"


@dataclass(frozen=True)
class CaseLine:
    """One row as shown: a cell per column."""

    case: str
    cells: tuple[str, ...]

    @classmethod
    def of(cls, r: CaseRow) -> CaseLine:
        speed = f"{r.baseline_ms / r.best_ms:.2f}x" if r.baseline_ms and r.best_ms else "-"
        pct = r.best_pct_of_floor
        floor = "-" if pct is None else f"{pct:.0%}" + (" SUSPECT" if pct > 1 / SUSPECT_MARGIN else "")
        return cls(r.case, (r.case, r.role[:4], r.status, speed, floor, str(r.attempts) if r.role == "performance" else "-",
                            "-" if r.max_rel_error is None else f"{r.max_rel_error:.2e}", _ms(r.median_ms),
                            _ms(r.best_ms), _ms(r.baseline_ms)))


class CaseTable(DataTable[Text]):
    lines: reactive[tuple[CaseLine, ...]] = reactive((), repaint=False)

    def on_mount(self) -> None:
        self.cursor_type = "none"
        for name in COLUMNS:
            self.add_column(name, key=name)
        self._rebuild(self.lines)  # any shown before the columns were there

    def show(self, v: RunView) -> None:
        self.lines = tuple(CaseLine.of(r) for r in v.cases.values())

    def watch_lines(self, old: tuple[CaseLine, ...], new: tuple[CaseLine, ...]) -> None:
        if not self.columns:
            return
        if [line.case for line in old] != [line.case for line in new] or self.row_count != len(new):
            self._rebuild(new)
            return
        for before, after in zip(old, new):
            for column, was, now in zip(COLUMNS, before.cells, after.cells):
                if was != now:
                    self.update_cell(after.case, column, Text(visible(str(now))), update_width=True)

    def _rebuild(self, lines: tuple[CaseLine, ...]) -> None:
        self.clear()
        for line in lines:
            self.add_row(*(Text(visible(str(c))) for c in line.cells), key=line.case)
