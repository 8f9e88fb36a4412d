"""The current candidate: CUDA source with line numbers, its diff against the best,
its compile log or mismatch report, and Nsight Compute's view of it and of the best, in tabs."""

import difflib

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static, TabbedContent, TabPane

from ..run_view import RunView


class CodePanel(Vertical):
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
        self.query_one("#code", Static).update(
            Syntax(v.source or "// waiting for the first candidate", "cuda", line_numbers=True, word_wrap=False))
        diff = "".join(difflib.unified_diff(v.best_source.splitlines(True), v.source.splitlines(True),
                                            "best.cu", "candidate.cu")) or "(same as the best)"
        self.query_one("#diff", Static).update(Syntax(diff, "diff", word_wrap=False))
        # Compile logs and model answers contain [brackets]: never read them as markup.
        self.query_one("#report", Static).update(Text(v.detail or "(nothing to report)"))
        profile = "\n".join(["candidate:", *(v.profile or ["(not profiled: run with --use-nsight)"]), "",
                              "best:", *(v.best_profile or ["(not profiled)"])])
        self.query_one("#profile", Static).update(Text(profile))
