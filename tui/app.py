"""The full-screen app: watch a session live, pause it, change its budget, stop
it, browse past runs. The loop runs in a worker thread; the UI only ever folds
the loop's typed events (warpsmith.agent.loop.events) into a RunView and renders it."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, RichLog

from warpsmith.agent.spec.visible_text import visible
from warpsmith.agent.tracking.past_runs import RunsSource

from .run_view import AttemptRow, CaseRow, RunView
from .screens.budget import BudgetChange, BudgetScreen
from .screens.confirm import ConfirmQuit
from .screens.runs import RunsScreen
from .widgets.attempt_tree import AttemptTree
from .widgets.case_table import CaseTable
from .widgets.code_panel import CodePanel
from .widgets.graph_view import GraphView
from .widgets.status_bar import StatusBar
from .widgets.trend import Trend

if TYPE_CHECKING:
    from warpsmith.agent.loop.session import Session

ACTIVE = ("starting", "running", "pausing", "stopping")


class WarpsmithApp(App[Optional[str]]):
    CSS_PATH = "app.tcss"
    TITLE = "warpsmith"
    BINDINGS = [
        ("p", "pause", "Pause/resume"),
        ("b", "budget", "Budget"),
        ("s", "stop_after_step", "Stop after step"),
        ("x", "stop_now", "Stop now"),
        ("r", "runs", "Past runs"),
        ("q", "quit", "Quit"),
    ]

    def __init__(self, session: Session, runs_source: Optional[RunsSource] = None,
                 resume: Optional[Callable[[str], Session]] = None):
        """session: an warpsmith.agent.loop.session.Session, ended here (Session.end) when its run ends
        or it is left paused; resume(session_id) opens another session (from the past-runs screen)."""
        super().__init__()
        self.session, self.runs_source, self.resume_factory = session, runs_source, resume
        self.view = self._view_for(session)
        self.status: Optional[str] = None  # what session.run() returned last
        self.error = ""  # why the last run failed, if it did
        self._quit_when_done = False
        self._sigterm_before: Optional[signal._HANDLER] = None  # the SIGTERM handler the app replaced while it runs
        self._sigterm_installed = False

    @staticmethod
    def _view_for(session: Session) -> RunView:
        w = session.workload
        search = session.info.search
        proposer = search.proposer.kind + (f" · {search.proposer.model}" if search.proposer.model else "")
        view = RunView(w.name, proposer, budget=search.budget)
        view.cases = {c.name: CaseRow(c.name, c.role) for c in w.cases}
        state = session.state
        view.limits = state.get("limits") or search.limits
        if state:  # a resumed session: show where it stands
            view.iteration, view.budget = state.get("iteration", 0), state.get("budget", view.budget)
            best = state.get("best")
            if best:
                view.best_ms, view.best_name, view.best_source = best.score_ms, best.spec.name, best.spec.source
                for c in best.cases:
                    if c.case in view.cases:
                        view.cases[c.case].best_ms = c.median_ms
            for case, ms in state.get("baseline", {}).items():
                if case in view.cases:
                    view.cases[case].baseline_ms = ms
            for a in state.get("history", []):
                view.attempts[a.iteration] = AttemptRow(a.iteration, a.name, a.parent, a.status, a.score_ms)
        return view

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield GraphView(id="graph")
        with Horizontal(id="middle"):
            yield CodePanel(id="code-panel")
            with Vertical(id="right"):
                yield CaseTable(id="cases")
                yield AttemptTree(id="tree")
                yield Trend(id="trend")
        yield RichLog(id="log", max_lines=500, wrap=True)
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_view()
        self.start_loop()
        try:  # SIGTERM (a scheduler, `kill`): stop now and leave, as headless does
            self._sigterm_before = signal.getsignal(signal.SIGTERM)
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.terminate)
            self._sigterm_installed = True
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no Unix signals
            pass

    def on_unmount(self) -> None:
        if not self._sigterm_installed:
            return
        try:  # asyncio resets the signal to its default: give back the handler that was there
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._sigterm_before if self._sigterm_before is not None else signal.SIG_DFL)
        except (NotImplementedError, RuntimeError, ValueError):
            pass

    def terminate(self) -> None:
        """Quit without asking: the GPU work in flight is killed, the graph drains at
        the step boundary (checkpoint resumable, MLflow run KILLED), then the app exits."""
        if self.active:
            self._quit_when_done = True
            self.action_stop_now()
        else:
            if self.view.state == "paused":
                self.session.end("stopped")
            self.exit(self.status)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for label, action in (("Pause or resume the run", self.action_pause),
                              ("Change the iteration budget", self.action_budget),
                              ("Stop after this step", self.action_stop_after_step),
                              ("Stop now", self.action_stop_now),
                              ("Browse past runs", self.action_runs)):
            yield SystemCommand(label, label, action)

    # -- the loop, in a worker thread -----------------------------------------
    def start_loop(self) -> None:
        self.view.state = "running"
        self.refresh_view()
        self._run_session()

    @work(thread=True, exclusive=True, group="loop")
    def _run_session(self) -> None:
        # no GPU, a rejected API key...: an Ending with its error, said in loop_ended
        ending = self.session.run_to_end(lambda e: self.call_from_thread(self.on_loop_event, e))
        self.call_from_thread(self.loop_ended, ending.status, ending.text)

    def on_loop_event(self, event: object) -> None:
        before = len(self.view.log)
        self.view.apply(event)
        log = self.query_one(RichLog)
        for line in self.view.log[before:]:
            log.write(Text(visible(line)))  # rationales and logs are plain text, not markup nor escapes
        self.refresh_view()

    def loop_ended(self, status: str, error: str) -> None:
        self.status, self.error = status, error
        self.view.state = {"paused": "paused", "finished": "finished", "stopped": "stopped"}.get(status, "failed")
        if error:
            self.notify(error, title="the run stopped", severity="error", timeout=30, markup=False)
        if status in ("finished", "stopped", "failed"):  # paused is not an end: p runs it again
            self.session.end(status)
        self.refresh_view()
        if self._quit_when_done:
            self.exit(status)

    def refresh_view(self) -> None:
        """Hands every widget the view; each redraws only the part of it that changed
        (reactive attributes), so a loop event costs what it changed, not a screen."""
        v = self.view
        self.query_one(StatusBar).show(v)
        self.query_one(GraphView).show(v)
        self.query_one(CodePanel).show(v)
        self.query_one(CaseTable).show(v)
        self.query_one(AttemptTree).show(v)
        self.query_one(Trend).show(v)

    @property
    def active(self) -> bool:
        return self.view.state in ACTIVE

    # -- controls -------------------------------------------------------------
    def action_pause(self) -> None:
        if self.view.state == "running":
            self.session.pause()
            self.view.state = "pausing"  # until the graph reaches the next step boundary
        elif self.view.state == "paused":
            self.start_loop()
        self.refresh_view()

    def action_budget(self) -> None:
        def apply(change: Optional[BudgetChange]) -> None:
            if change is None:
                return
            if self.active:
                self.session.control.set_budget(change.iterations)
                if change.limits:
                    self.session.control.set_limits(**change.limits)
            else:
                self.session.set_budget(change.iterations)
                if change.limits:
                    self.session.set_limits(**change.limits)
            self.view.budget, self.view.limits = change.iterations, self.view.limits.merged(change.limits)
            self.notify(f"budget set to {change.iterations}" + (f"; limits changed: {change.limits}" if change.limits else ""))
            self.refresh_view()
        self.push_screen(BudgetScreen(self.view.budget, self.view.iteration, self.view.limits), apply)

    def action_stop_after_step(self) -> None:
        if self.active:
            self.session.stop_after_step()
            self.view.state = "stopping"
            self.refresh_view()

    def action_stop_now(self) -> None:
        if self.active:
            self.session.stop_now()  # kills the GPU work in flight, abandons a model call
            self.view.state = "stopping"
            self.refresh_view()

    def action_runs(self) -> None:
        if self.runs_source is None:
            self.notify("tracking is off: no past runs to show", severity="warning")
            return
        self.push_screen(RunsScreen(self.runs_source, self.resume_session))

    def resume_session(self, session_id: str) -> None:
        if self.active:
            self.notify("stop the current run before resuming another", severity="warning")
            return
        if self.resume_factory is None:
            return
        try:
            session = self.resume_factory(session_id)
        except Exception as e:  # moved workload, missing session, no API key...
            self.notify(f"cannot resume {session_id}: {type(e).__name__}: {e}", severity="error", markup=False)
            return
        if self.view.state == "paused":
            self.session.end("stopped")  # left behind: its MLflow run must not stay RUNNING
        self.session = session
        self.view = self._view_for(self.session)
        self.pop_screen()
        self.start_loop()

    async def action_quit(self) -> None:
        if not self.active:
            if self.view.state == "paused":
                self.session.end("stopped")
            self.exit(self.status)
            return
        def decide(yes: Optional[bool]) -> None:
            if yes:
                self._quit_when_done = True
                self.action_stop_now()
        self.push_screen(ConfirmQuit(), decide)
