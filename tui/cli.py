"""The `warpsmith` command: agent's CLI, with the Textual app as the front end of
`run` and `resume` (unless --headless). Lives here so agent never imports tui."""

from __future__ import annotations

import sys


def run_app(session, args) -> str:
    """Run `session` in the app; returns its status. Sessions resumed from the
    past-runs screen are closed here when they end; `session` is closed by the caller."""
    from agent.cli_loop import finish_session, resume_session
    from .app import WarpsmithApp
    from .screens.runs import RunsSource
    tracker = session.tracker
    source = RunsSource(tracker) if getattr(tracker, "client", None) is not None else None
    statuses = {}

    def on_end(ended, status: str) -> None:
        statuses[id(ended)] = status
        if ended is not session:
            finish_session(ended, status)
        else:  # its MLflow status is true at once; the rest is closed when the app exits
            ended.tracker.end({"finished": "FINISHED", "failed": "FAILED"}.get(status, "KILLED"))

    app = WarpsmithApp(session, on_end, source, lambda sid: resume_session(sid, args))
    app.run()
    if app.session is not session and id(app.session) not in statuses:
        finish_session(app.session, app.status or "stopped")
    return statuses.get(id(session)) or (app.status if app.session is session else None) or "stopped"


def main(argv: list[str] | None = None) -> int:
    from agent.cli import main as agent_main
    return agent_main(argv, front_end=run_app)


if __name__ == "__main__":
    sys.exit(main())
