"""The header line: workload, proposer, GPU, iteration / budget, state, best."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ..run_view import RunView

STATE_STYLE = {"running": "bold green", "pausing": "bold yellow", "paused": "bold yellow",
               "stopping": "bold yellow", "finished": "bold cyan", "stopped": "bold red", "failed": "bold red"}


@dataclass(frozen=True)
class Header:
    workload: str
    proposer: str
    gpu: str
    iteration: int
    budget: int
    state: str
    best_ms: Optional[float]
    speedup: Optional[float]
    result: str = ""  # "dispatch" or "best" once the session's result is in


class StatusBar(Static):
    header: reactive[Optional[Header]] = reactive(None, repaint=False)

    def show(self, v: RunView) -> None:
        if v.result is not None:  # what the user gets: the dispatch where it paid
            self.header = Header(v.workload, v.proposer, v.gpu, v.iteration, v.budget, v.state, v.result.score_ms,
                                 v.result.speedup, v.result.served_by)
        else:
            self.header = Header(v.workload, v.proposer, v.gpu, v.iteration, v.budget, v.state, v.best_ms, v.speedup)

    def watch_header(self, h: Optional[Header]) -> None:
        if h is None:
            return
        t = Text()
        t.append(f" {h.workload} ", "bold reverse")
        t.append(f"  {h.proposer}  ·  {h.gpu}  ·  iteration {h.iteration} / {h.budget}  ·  ")
        t.append(h.state, STATE_STYLE.get(h.state, "bold"))
        if h.best_ms is not None:
            t.append(f"  ·  {'result' if h.result else 'best'} {h.best_ms:.4f} ms"
                     + (" (dispatch)" if h.result == "dispatch" else ""))
            if h.speedup:
                t.append(f" ({h.speedup:.2f}x library)", "bold")
        self.update(t)
