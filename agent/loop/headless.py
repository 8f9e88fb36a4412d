"""The headless front end: a progress bar and one line per attempt, from the
loop's typed events (the same stream the Textual app consumes)."""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

from ..evaluate.results import Status
from . import events


class HeadlessProgress:
    def __init__(self, budget: int, baseline_name: str = "baseline", out: Optional[TextIO] = None):
        self.budget, self.baseline_name, self.out = budget, baseline_name, out
        self.best: Optional[float] = None
        self.speedup: Optional[float] = None
        self.t0 = time.monotonic()

    def bar(self, done: int) -> str:
        width = 24
        filled = min(width, int(width * done / max(1, self.budget)))
        return "[" + "#" * filled + "." * (width - filled) + f"] {done:>3}/{self.budget}"

    def __call__(self, event: object) -> None:
        if isinstance(event, events.NewBest):
            self.best, self.speedup = event.score_ms, event.speedup_vs_baseline
            if event.iteration == 0:
                self._print(f"starting kernel: {event.score_ms:.4f} ms" + self._vs())
        elif isinstance(event, events.BudgetChanged):
            self.budget = event.new
            self._print(f"budget changed: {event.old} -> {event.new}")
        elif isinstance(event, events.AttemptFinished):
            score = f"{event.score_ms:.4f} ms" if event.score_ms else "-"
            best = f"best {self.best:.4f} ms{self._vs()}" if self.best else "no valid kernel yet"
            first = event.detail.strip().splitlines()[0][:100] if event.status != Status.OK and event.detail.strip() else ""
            on = f"  [{event.gpu.split(':')[0]}]" if event.gpu else ""  # on Ray: the GPU actor that ran it
            self._print(f"{self.bar(event.iteration)} {event.name[:48]:<48} {event.status:<15} {score:>11}  {best}{on}"
                        + (f"\n      {first}" if first else ""))
        elif isinstance(event, events.ResultReady):
            self._print(event.headline)
        elif isinstance(event, events.Notice):
            self._print(f"note: {event.text}")
        elif isinstance(event, events.Profiled):
            for line in event.summaries:
                self._print(f"      ncu {line}")
        elif isinstance(event, events.SessionFinished):
            self._print(f"finished ({event.reason}) in {time.monotonic() - self.t0:.1f} s")

    def _vs(self) -> str:
        return f" ({self.speedup:.2f}x {self.baseline_name})" if self.speedup else ""

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stdout, flush=True)  # sys.stdout as it is now, not at import
