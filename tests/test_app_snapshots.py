"""Snapshot tests of the app's screens (pytest-textual-snapshot), made
deterministic by an EvaluatorDouble with fixed scores and a fixed pause point."""

from __future__ import annotations

from app_factory import make_app, make_session, wait_for

from warpsmith.agent.loop import events

SIZE = (160, 48)


def paused_after_two(tmp_path):
    """An app whose session pauses at the step boundary after iteration 2, every time."""
    app = make_app(tmp_path, 5, delay_s=0.0)
    forward = app.on_loop_event
    def on_loop_event(event):
        forward(event)
        if isinstance(event, events.AttemptFinished) and event.iteration == 2:
            app.session.control.request("pause")
    app.on_loop_event = on_loop_event
    return app


def test_main_screen_mid_run(snap_compare, tmp_path):
    """The main screen of a paused run: header, graph, code, case table, trend, log."""
    app = paused_after_two(tmp_path)
    async def run_before(pilot):
        await wait_for(pilot, lambda: app.view.state == "paused")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_budget_dialog(snap_compare, tmp_path):
    """The budget dialog over a paused run."""
    app = paused_after_two(tmp_path)
    async def run_before(pilot):
        await wait_for(pilot, lambda: app.view.state == "paused")
        await pilot.press("b")
        await pilot.pause(0.2)
        from textual.widgets import Input
        app.screen.query_one(Input).cursor_blink = False  # a blinking cursor is not deterministic
        await pilot.pause(0.2)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_past_runs_screen(snap_compare, tmp_path, monkeypatch):
    """The past-runs screen: sessions from MLflow with the selected one's best kernel and report."""
    import warpsmith.tui.screens.runs as runs
    monkeypatch.setattr(runs, "when", lambda epoch: "2026-12-02 12:00")
    import warpsmith.agent.loop.session  # the report's running time is wall clock: fixed for a deterministic screen
    monkeypatch.setattr(warpsmith.agent.loop.session, "ended_text", lambda state: "ended by the budget; 2 attempts, 1 s running")
    older = make_session(tmp_path, 2, "older", delay_s=0.0)
    older.end(older.run())
    older.close()
    app = make_app(tmp_path, 1, delay_s=0.0)
    async def run_before(pilot):
        await wait_for(pilot, lambda: app.view.state == "finished")
        await pilot.press("r")
        await pilot.pause(0.5)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
