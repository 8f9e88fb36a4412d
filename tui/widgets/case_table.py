"""Per case: role, status, max error, candidate / best / baseline median, speed-up,
and how close the best is to the case's speed-of-light floor (floor: the floor over the best median, 100% = at the limit)."""

from textual.widgets import DataTable

from agent.spec.speed_of_light import SUSPECT_MARGIN

from ..run_view import RunView

COLUMNS = ("case", "role", "status", "max err", "cand ms", "best ms", "base ms", "vs base", "floor")


def _ms(x):
    return "-" if x is None else f"{x:.4f}"


class CaseTable(DataTable):
    def on_mount(self) -> None:
        self.cursor_type = "none"
        self.add_columns(*COLUMNS)

    def show(self, v: RunView) -> None:
        self.clear()
        for r in v.cases.values():
            speed = f"{r.baseline_ms / r.best_ms:.2f}x" if r.baseline_ms and r.best_ms else "-"
            pct = r.best_pct_of_floor
            floor = "-" if pct is None else f"{pct:.0%}" + (" SUSPECT" if pct > 1 / SUSPECT_MARGIN else "")
            self.add_row(r.case, r.role[:4], r.status, "-" if r.max_rel_error is None else f"{r.max_rel_error:.2e}",
                         _ms(r.median_ms), _ms(r.best_ms), _ms(r.baseline_ms), speed, floor)
