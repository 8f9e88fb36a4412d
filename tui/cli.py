"""The `warpsmith` command: agent's CLI, with the Textual app as the front end of
`run` and `resume` (unless --headless). Lives here so agent never imports tui."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warpsmith.agent.loop.options import SessionOptions
    from warpsmith.agent.loop.session import Session
    from warpsmith.agent.spec.workload_model import Workload


def run_app(session: Session, options: SessionOptions) -> str:
    """Run `session` in the app; returns how it ended. The app ends every session it
    runs (Session.end); the caller closes `session`. Sessions resumed from the
    past-runs screen are closed here, after the app exits (it may show them until then)."""
    from warpsmith.agent.cli.sessions import resume_session
    from warpsmith.agent.tracking.past_runs import RunsSource
    from warpsmith.agent.tracking.tracker import Tracker

    from .app import WarpsmithApp
    tracker = session.tracker
    source = RunsSource(tracker) if isinstance(tracker, Tracker) else None  # past runs are MLflow's
    opened: list[Session] = []

    def resume(session_id: str) -> Session:
        resumed = resume_session(session_id, options.evaluation, options.tracking)
        opened.append(resumed)
        return resumed

    app = WarpsmithApp(session, source, resume)
    app.run()
    for other in opened:
        other.end("stopped")  # records nothing when the app ended it already
        other.close()
    return session.ended or app.status or "stopped"


def review_in_app(workload: Workload, question: str) -> bool:
    """The review screen of a drafted reference; True only on the user's yes."""
    from .screens.review import ReviewApp
    return bool(ReviewApp(workload, question).run())


def main(argv: list[str] | None = None) -> int:
    from warpsmith.agent.cli.commands import main as agent_main
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
