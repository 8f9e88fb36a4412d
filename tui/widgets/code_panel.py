"""The current candidate: CUDA source with line numbers, its diff against the best,
its compile log or mismatch report, and Nsight Compute's view of it and of the best, in tabs.
Each tab is redrawn only when what it shows changes: highlighting a kernel and
diffing it are the costly part of the screen, and most loop events change neither."""

from __future__ import annotations

import difflib

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static, TabbedContent, TabPane

from warpsmith.agent.spec.visible_text import visible

from ..run_view import RunView


class CodePanel(Vertical):
    source: reactive[str] = reactive("", repaint=False)  # the current candidate's
    best_source: reactive[str] = reactive("", repaint=False)
    detail: reactive[str] = reactive("", repaint=False)  # its compile log or mismatch report
    profile: reactive[tuple[str, ...]] = reactive((), repaint=False)
    best_profile: reactive[tuple[str, ...]] = reactive((), repaint=False)

    def compose(self) -> ComposeResult:
        with TabbedContent():
            with TabPane("code", id="tab-code"):
                yield VerticalScroll(Static(id="code"))
            with TabPane("diff vs best", id="tab-diff"):
                yield VerticalScroll(Static(id="diff"))
            with TabPane("log / report", id="tab-log"):
                yield VerticalScroll(Static(id="report"))
            with TabPane("profile", id="tab-profile"):
                yield VerticalScroll(Static(id="profile"))

    def show(self, v: RunView) -> None:
        self.source, self.best_source, self.detail = v.source, v.best_source, v.detail
        self.profile, self.best_profile = tuple(v.profile), tuple(v.best_profile)

    def watch_source(self) -> None:
        self.query_one("#code", Static).update(
            Syntax(visible(self.source) or "// waiting for the first candidate", "cuda", line_numbers=True, word_wrap=False))
        self._show_diff()

    def watch_best_source(self) -> None:
        self._show_diff()

    def _show_diff(self) -> None:
        diff = "".join(difflib.unified_diff(self.best_source.splitlines(True), self.source.splitlines(True),
                                            "best.cu", "candidate.cu")) or "(same as the best)"
        self.query_one("#diff", Static).update(Syntax(visible(diff), "diff", word_wrap=False))

    def watch_detail(self) -> None:
        # Compile logs and model answers contain [brackets]: never read them as markup.
        self.query_one("#report", Static).update(Text(visible(self.detail) or "(nothing to report)"))

    def watch_profile(self) -> None:
        self._show_profile()

    def watch_best_profile(self) -> None:
        self._show_profile()

    def _show_profile(self) -> None:
        profile = "\n".join(["candidate:", *(self.profile or ["(not profiled: run with --use-nsight)"]), "",
                              "best:", *(self.best_profile or ["(not profiled)"])])
        self.query_one("#profile", Static).update(Text(profile))
