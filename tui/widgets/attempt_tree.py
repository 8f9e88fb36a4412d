"""The tree of candidates: the frontier (the fastest attempts, marked with their rank,
where the next batch branches from) and then the latest attempts, each with the
attempt it was derived from. Rebuilt only when its lines change."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import DataTable

from warpsmith.agent.spec.visible_text import visible

from ..run_view import AttemptRow, RunView

COLUMNS = ("", "#", "from", "attempt", "status", "ms")
RECENT = 12  # the latest attempts shown below the frontier


@dataclass(frozen=True)
class TreeLine:
    """One row as shown: a cell per column."""

    key: str
    cells: tuple[str, ...]

    @classmethod
    def of(cls, a: AttemptRow, mark: str) -> TreeLine:
        parent = "start" if a.parent == 0 else ("-" if a.parent is None else f"#{a.parent}")
        return cls(f"{mark or 'r'}{a.iteration}", (mark, str(a.iteration), parent, a.name, a.status,
                                                     "-" if a.score_ms is None else f"{a.score_ms:.4f}"))


def tree_lines(v: RunView) -> tuple[TreeLine, ...]:
    frontier = [TreeLine.of(a, f"*{rank}") for rank, a in enumerate(v.frontier, 1)]
    recent = sorted(v.attempts.values(), key=lambda a: a.iteration, reverse=True)[:RECENT]
    return tuple(frontier + [TreeLine.of(a, "") for a in recent])


class AttemptTree(DataTable[Text]):
    lines: reactive[tuple[TreeLine, ...]] = reactive((), repaint=False)

    def on_mount(self) -> None:
        self.cursor_type = "none"
        self.border_title = "frontier (*) and attempts, each from its parent"
        for name in COLUMNS:
            self.add_column(name, key=name or "mark")
        self._rebuild(self.lines)

    def show(self, v: RunView) -> None:
        self.lines = tree_lines(v)

    def watch_lines(self, old: tuple[TreeLine, ...], new: tuple[TreeLine, ...]) -> None:
        if self.columns and old != new:
            self._rebuild(new)

    def _rebuild(self, lines: tuple[TreeLine, ...]) -> None:
        self.clear()
        for line in lines:
            self.add_row(*(Text(visible(str(c))) for c in line.cells), key=line.key)
