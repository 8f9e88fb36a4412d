"""The `warpsmith` command: agent's CLI, with the Textual app as the front end of
`run` and `resume` (unless --headless). Lives here so agent never imports tui."""

from __future__ import annotations

import sys


def run_app(session, args) -> str:
    """Run `session` in the app; returns its status. `session` is closed by the
    caller; sessions resumed from the past-runs screen are closed here, after the
    app exits (the app may still show them until then)."""
    from agent.cli.loop_commands import finish_session, resume_session
    from agent.tracking.tracker import Tracker

    from .app import WarpsmithApp
    from .screens.runs import RunsSource
    tracker = session.tracker
    source = RunsSource(tracker) if isinstance(tracker, Tracker) else None  # past runs are MLflow's
    statuses: dict[int, str] = {}
    opened = []

    def on_end(ended, status: str) -> None:
        # The MLflow status is made true at once; files and processes are closed at exit.
        statuses[id(ended)] = status
        ended.tracker.end_session(status)

    def resume(session_id: str):
        resumed = resume_session(session_id, args)
        opened.append(resumed)
        return resumed

    app = WarpsmithApp(session, on_end, source, resume)
    app.run()
    for other in opened:
        finish_session(other, statuses.get(id(other)) or (app.status if other is app.session else None) or "stopped")
    return statuses.get(id(session)) or (app.status if app.session is session else None) or "stopped"


def review_in_app(workload, question: str) -> bool:
    """The review screen of a drafted reference; True only on the user's yes."""
    from .screens.review import ReviewApp
    return bool(ReviewApp(workload, question).run())


def main(argv: list[str] | None = None) -> int:
    from agent.cli.commands import main as agent_main
    try:
        return agent_main(argv, front_end=run_app, review_front_end=review_in_app)
    finally:
        exit_promptly()


def exit_promptly() -> None:
    """Called once the command is done and has closed its files, checkpoint and MLflow
    run. The interpreter's last garbage collection walks every object left (langchain,
    MLflow, SQLAlchemy): 1.5-3.5 s on a busy 2-core machine, most of a SIGTERM's stop
    time. Frozen objects are skipped, so warpsmith exits in a fraction of a second."""
    import gc
    gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
