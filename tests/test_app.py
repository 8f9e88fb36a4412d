"""The Textual app driven by Pilot: every control acts on a real session (graph,
checkpointer, MLflow); an EvaluatorDouble stands in for the GPU."""

from __future__ import annotations

import pytest
from app_factory import make_app, make_session, wait_for
from evaluator_double import Gate
from mlflow.tracking import MlflowClient

from warpsmith.tui.screens.budget import BudgetScreen
from warpsmith.tui.screens.confirm import ConfirmQuit
from warpsmith.tui.screens.runs import RunsScreen
from warpsmith.tui.widgets.case_table import CaseTable


async def test_run_to_the_end_fills_the_screen(tmp_path):
    """A 3-iteration run finishes; header, case table and trend show the best and the baseline."""
    app = make_app(tmp_path, 3)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.state == "finished")
        v = app.view
        assert v.iteration == 3 and v.best_ms is not None and v.gpu.startswith("EvaluatorDouble")
        assert v.cases["square-256"].baseline_ms == pytest.approx(0.5)
        assert app.query_one(CaseTable).row_count == 2
        assert len(v.trend) == 3 and app.session.ended == "finished"


async def test_pause_stops_at_the_next_step_and_resume_continues(tmp_path):
    """p pauses at a step boundary (the graph really stops), p again resumes to the budget."""
    gate = Gate(free=1)  # the second evaluation is in flight when p is pressed
    app = make_app(tmp_path, 6, delay_s=0.0, gate=gate)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, gate.held.is_set)
        await pilot.press("p")
        assert app.view.state in ("pausing", "paused")
        gate.release()
        await wait_for(pilot, lambda: app.view.state == "paused")
        stopped_at = app.session.state["iteration"]
        calls = len(app.session.evaluator.calls)
        await pilot.pause(0.5)
        assert len(app.session.evaluator.calls) == calls  # nothing runs while paused
        assert stopped_at < 6
        await pilot.press("p")
        await wait_for(pilot, lambda: app.view.state == "finished")
        assert app.session.state["iteration"] == 6


async def test_budget_change_while_running_ends_at_the_new_budget(tmp_path):
    """b opens the budget dialog; 2 + Enter while running ends the run at 2 iterations."""
    gate = Gate()  # iteration 1's GPU work is in flight until the dialog has been answered
    app = make_app(tmp_path, 20, delay_s=0.0, gate=gate)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, gate.held.is_set)
        await pilot.press("b")
        assert isinstance(app.screen, BudgetScreen)
        await pilot.press("2", "enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, BudgetScreen))
        assert app.view.state == "running" and len(app.session.evaluator.calls) == 1
        gate.release()
        await wait_for(pilot, lambda: app.view.state == "finished")
        assert app.session.state["iteration"] == 2 and app.view.budget == 2


async def test_stop_now_leaves_a_resumable_checkpoint_and_a_killed_run(tmp_path):
    """x kills the GPU work in flight; the session is stopped, resumable, its MLflow run KILLED."""
    gate = Gate(free=1)  # never released: x must kill the second evaluation in flight
    app = make_app(tmp_path, 8, delay_s=0.0, gate=gate)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, gate.held.is_set)
        await pilot.press("x")
        await wait_for(pilot, lambda: app.view.state == "stopped")
        done = app.session.state["iteration"]
    app.session.close()
    assert app.session.ended == "stopped"
    assert MlflowClient(app.session.tracker.uri).get_run(app.session.info.mlflow_run_id).info.status == "KILLED"
    resumed = make_session(tmp_path, 8, delay_s=0.0)
    assert resumed.run() == "finished"
    assert [a.iteration for a in resumed.state["history"]] == list(range(1, 9)) and done < 8


async def test_stop_after_step(tmp_path):
    """s stops at the next step boundary without killing anything."""
    gate = Gate(free=1)
    app = make_app(tmp_path, 8, delay_s=0.0, gate=gate)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, gate.held.is_set)
        await pilot.press("s")
        gate.release()
        await wait_for(pilot, lambda: app.view.state == "stopped")
        assert app.session.state["iteration"] < 8 and app.session.ended == "stopped"


async def test_quit_asks_while_running(tmp_path):
    """q during a run asks first; 'keep running' keeps it running."""
    gate = Gate()  # the run is held in iteration 1 while the question is asked
    app = make_app(tmp_path, 20, delay_s=0.0, gate=gate)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, gate.held.is_set)
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmQuit)
        await pilot.press("escape")
        assert not isinstance(app.screen, ConfirmQuit) and app.view.state == "running"
        await pilot.press("x")
        await wait_for(pilot, lambda: app.view.state == "stopped")


async def test_sigterm_stops_the_run_and_closes_the_app(tmp_path):
    """SIGTERM to the process running the app: stop now (no question asked), a resumable
    checkpoint, the run's end recorded as stopped, and the app exits on its own."""
    import os
    import signal
    gate = Gate(free=1)  # never released: SIGTERM must kill the second evaluation in flight
    app = make_app(tmp_path, 20, delay_s=0.0, gate=gate)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, gate.held.is_set)
        os.kill(os.getpid(), signal.SIGTERM)
        await wait_for(pilot, lambda: app.return_value is not None)
    assert app.return_value == "stopped" and app.session.ended == "stopped" and app.session.state["iteration"] < 20
    resumed = make_session(tmp_path, 20, delay_s=0.0)
    resumed.control.set_budget(app.session.state["iteration"] + 1)
    resumed.set_budget(app.session.state["iteration"] + 1)
    assert resumed.run() == "finished"


async def test_past_runs_lists_sessions_and_resumes_one(tmp_path):
    """r lists MLflow sessions with the selected one's kernel; R resumes a stopped one."""
    first = make_session(tmp_path, 2, "older", delay_s=0.0)
    first.run()
    first.set_budget(3)
    first.end("stopped")
    first.close()
    app = make_app(tmp_path, 1)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.state == "finished")
        await pilot.press("r")
        assert isinstance(app.screen, RunsScreen)
        screen = app.screen
        assert {r.session for r in screen.rows} == {"older", "s1"}
        index = [r.session for r in screen.rows].index("older")
        for _ in range(index):
            await pilot.press("down")
        await pilot.press("R")
        await wait_for(pilot, lambda: app.session.info.id == "older" and app.view.state == "finished")
        assert app.session.state["iteration"] == 3


async def test_command_palette_offers_the_controls(tmp_path):
    """ctrl+p, 'iteration budget', Enter opens the budget dialog, like the b key."""
    app = make_app(tmp_path, 2, delay_s=0.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.state == "finished")
        from textual.command import CommandList, CommandPalette
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"iteration budget")
        hits = app.screen.query_one(CommandList)  # the search runs in a worker: wait for its hit
        await wait_for(pilot, lambda: any("budget" in str(hits.get_option_at_index(i).prompt).lower()
                                          for i in range(hits.option_count)) and hits.highlighted is not None)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, BudgetScreen), 10)


async def test_real_worker_starts_under_the_app(tmp_path):
    """The GPU worker process starts from inside the app (whose stderr is not a real
    file): without a GPU the run fails with the driver's message, not a spawn error."""
    from workload_factory import make_sgemm_workload

    from warpsmith.agent.cli.sessions import open_session
    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.loop.options import SearchOptions
    from warpsmith.agent.loop.session import SessionInfo, session_dir
    from warpsmith.agent.tracking.options import TrackingOptions
    from warpsmith.tui.app import WarpsmithApp
    w = make_sgemm_workload(tmp_path / "w")
    tracking = TrackingOptions(tmp_path / "store", enabled=False)
    info = SessionInfo("real", str(w), SearchOptions(budget=1))
    session = open_session(info, session_dir(tracking.store, "real"), EvaluationOptions(), tracking)
    app = WarpsmithApp(session)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.state in ("failed", "finished"))
    if app.view.state == "failed":
        assert "GpuUnavailable" in app.error and "fds_to_keep" not in app.error
    assert (session.dir / "worker.log").exists() or app.view.state == "finished"
    session.evaluator.close()


async def test_compile_log_and_model_text_with_brackets_render(tmp_path):
    """A detail full of [brackets] (pydantic errors, NVRTC source echoes) is shown, not parsed as markup."""
    from warpsmith.agent.loop import events
    app = make_app(tmp_path, 1, delay_s=0.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.state == "finished")
        bad = "1 validation error [type=json_invalid, input_value='', input_type=str] [/] As[ty][tx] = A[r];"
        app.on_loop_event(events.AttemptFinished(2, "llm-2", "proposal_invalid", None, bad))
        await pilot.pause(0.2)
        assert app.view.detail == bad


async def test_budget_dialog_sets_patience_while_running(tmp_path):
    """The budget dialog's patience field, set while running, ends the run by patience."""
    from textual.widgets import Input
    gate = Gate()  # iteration 1 is in flight until the dialog has been applied
    app = make_app(tmp_path, 20, delay_s=0.0, gate=gate)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, gate.held.is_set)
        await pilot.press("b")
        app.screen.query_one("#limit-patience", Input).value = "1"
        await pilot.click("#apply")
        await wait_for(pilot, lambda: not isinstance(app.screen, BudgetScreen))
        gate.release()
        await wait_for(pilot, lambda: app.view.state == "finished", 60)
        st = app.session.state
        assert st["limits"].patience == 1 and st["finished"].startswith("patience")
        assert any(line.startswith("limits: patience 1") for line in app.view.log)


async def test_a_loop_event_redraws_only_what_it_changed(tmp_path, monkeypatch):
    """Over an attempt's events (the candidate changes once, the best once) the code is
    highlighted once and diffed twice, and the case table changes cells in its rows, never rebuilding them."""
    from rich.syntax import Syntax

    import warpsmith.tui.widgets.code_panel as code_panel
    from warpsmith.agent.loop import events
    from warpsmith.tui.widgets.status_bar import StatusBar
    highlighted = []

    class CountedSyntax(Syntax):  # the real highlighter, counted
        def __init__(self, code, lexer, **kw):
            highlighted.append(lexer)
            super().__init__(code, lexer, **kw)
    monkeypatch.setattr(code_panel, "Syntax", CountedSyntax)
    app = make_app(tmp_path, 1, delay_s=0.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.state == "finished")
        table = app.query_one(CaseTable)
        rows, cases = list(table.rows), list(app.view.cases)
        timed = [name for name, row in app.view.cases.items() if row.role == "performance"]
        source = app.view.source + "\n// the next candidate\n"
        attempt = [events.NodeStarted("propose", 2), events.CandidateProposed(2, "next", "tune", "why", source),
                   events.NodeStarted("evaluate", 2), events.CompileFinished(2, True, 0.0, "64 registers", ""),
                   *(events.CaseFinished(2, c, "validate", "ok", 1e-7) for c in cases),
                   *(events.CaseFinished(2, c, "time", "ok", None, 0.25) for c in timed),
                   *(events.CaseFinished(2, c, "revalidate", "ok", 2e-7) for c in cases),
                   events.NodeStarted("reflect", 2), events.AttemptFinished(2, "next", "ok", 0.25, ""),
                   events.NewBest(2, "next", 0.25, 2.0), events.NodeFinished("reflect")]
        highlighted.clear()
        for event in attempt:
            app.on_loop_event(event)
        await pilot.pause()
        assert len(attempt) >= 13 and highlighted.count("cuda") == 1 and highlighted.count("diff") == 2
        assert list(table.rows) == rows  # the same rows, their cells changed in place
        assert str(table.get_cell(timed[0], "best ms")) == "0.2500" and str(table.get_cell(cases[0], "max err")) == "2.00e-07"
        assert app.query_one(StatusBar).header.best_ms == 0.25 and app.view.best_source == source


async def test_the_tree_shows_each_attempts_parent_and_the_frontier(tmp_path):
    """After a run, the tree panel lists the frontier (the fastest passing attempts, ranked) above the latest
    attempts, each row naming the attempt it came from as the session recorded it."""
    from warpsmith.tui.run_view import FRONTIER
    from warpsmith.tui.widgets.attempt_tree import AttemptTree
    app = make_app(tmp_path, 6, delay_s=0.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.state == "finished")
        history = app.session.state["history"]
        tree = app.query_one(AttemptTree)
        rows = [[str(c) for c in tree.get_row_at(i)] for i in range(tree.row_count)]
        passed = sorted((a for a in history if a.status == "ok" and a.score_ms), key=lambda a: a.score_ms)
        frontier = [r for r in rows if r[0].startswith("*")]
        assert [r[1] for r in frontier] == [str(a.iteration) for a in passed[:FRONTIER]]
        assert frontier[0][0] == "*1" and frontier[0][1] == str(app.session.state["best"].iteration)
        recent = {r[1]: r[2] for r in rows if not r[0]}
        assert len(recent) == len(history)
        for a in history:
            assert recent[str(a.iteration)] == ("-" if a.parent is None else "start" if a.parent == 0 else f"#{a.parent}")
        assert any(r[2].startswith("#") for r in rows)  # a neighbour names its parent


def test_the_case_table_counts_the_attempts_searched_for_each_case():
    """A proposal's focus case is counted on that case's row ('tries'); the geomean's are not."""
    from warpsmith.agent.loop import events
    from warpsmith.tui.run_view import CaseRow, RunView
    from warpsmith.tui.widgets.case_table import COLUMNS, CaseLine
    view = RunView("sgemm", "tune")
    view.cases = {"small": CaseRow("small", "correctness"), "decode": CaseRow("decode", "performance"),
                  "square": CaseRow("square", "performance")}
    for i, focus in enumerate(["decode", None, "decode", "square"], 1):
        view.apply(events.CandidateProposed(i, f"k{i}", "tune", "", "", focus=focus))
    tries = {line.case: line.cells[COLUMNS.index("tries")] for line in map(CaseLine.of, view.cases.values())}
    assert tries == {"small": "-", "decode": "2", "square": "1"}
