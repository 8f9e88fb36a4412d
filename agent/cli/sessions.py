"""Sessions for `run`, `resume`, `bench` and the app's past-runs screen: started or
resumed from options, driven headless or in a front end, ended once (Session.end)."""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TextIO

from ..evaluate.options import EvaluationOptions
from ..loop.options import SessionOptions
from ..spec.workload import load_workload
from ..spec.workload_model import Workload
from ..tracking.options import TrackingOptions, open_tracker
from .check import preflight

if TYPE_CHECKING:
    from types import FrameType

    from ..loop.session import Ending, Session, SessionInfo
    from ..proposers.base import Proposer
    from ..worker.protocol import TimingConfig

# front_end(session, options) -> status: runs the session in a full-screen app and ends it there
FrontEnd = Callable[["Session", SessionOptions], str]


def open_session(info: SessionInfo, directory: Path, evaluation: EvaluationOptions, tracking: TrackingOptions,
                 proposer: Optional[Proposer] = None, gpu_first: bool = False) -> Session:
    """gpu_first: start the GPU worker before the tracker or checkpoint exists; without
    a usable GPU nothing is left behind (agent/cli/gpu_first.py)."""
    from ..evaluate.backend_choice import open_backend
    from ..loop.session import Session
    from ..proposers.choice import make_proposer
    workload = load_workload(info.workload, info.shapes).timing_only(info.search.cases)
    evaluator = open_backend(workload, evaluation, directory)
    if gpu_first:
        from .gpu_first import start_worker_first
        start_worker_first(evaluator, directory)
    return Session(info, directory, workload, evaluator, proposer or make_proposer(info.search.proposer),
                   open_tracker(tracking))


def _timing_text(t: TimingConfig) -> str:
    return (f"warm-up {t.warmup}, {t.repetitions} launches or {t.max_total_ms:.0f} ms per case, "
            f"{'cold' if t.cold_l2 else 'hot'} L2")


def start_session(options: SessionOptions, workload: Workload, out: Optional[TextIO] = None) -> Session:
    """A new session on `workload`, its MLflow run started. Raises ProposerUnavailable
    (no key, ...) or GpuUnavailable before anything is created."""
    from ..loop.session import SessionInfo, new_session_id, session_dir
    from ..proposers.choice import make_proposer
    search = options.search
    workload.timing_only(search.cases)  # an unknown case name fails here, before anything is created
    info = SessionInfo(new_session_id(workload.name), str(workload.directory.resolve()), search, shapes=workload.shapes)
    chosen = make_proposer(search.proposer)
    llm_part = getattr(chosen, "llm", None)
    if search.limits.cost_usd and llm_part is not None and not (llm_part.price and llm_part.price.output):
        print(f"warpsmith: warning: --cost-budget cannot stop this session: model '{search.proposer.model}' has no "
              "price here (a local server, or not in the price table); add it to prices.toml or use --token-budget",
              file=sys.stderr)
    directory = session_dir(options.tracking.store, info.id)
    session = open_session(info, directory, options.evaluation, options.tracking, chosen,
                           gpu_first=True)  # raises GpuUnavailable, leaving nothing
    choice = search.proposer
    run_id = session.tracker.start(workload.name, info.id, {
        "workload": workload.name, "workload_digest": workload.digest, "proposer": choice.kind, "model": choice.model,
        "reasoning_effort": choice.reasoning_effort, "budget": search.budget, "seed": choice.seed,
        **{f"limit_{k}": v for k, v in search.limits.given().items()},
        "nvidia_research": choice.research, "use_nsight": search.nsight, "timed_cases": ",".join(search.cases) or "all",
        "timing": _timing_text(options.evaluation.timing)})
    info.mlflow_run_id = run_id or ""
    info.save(directory)
    if options.tracking.trace and run_id:
        from ..tracking.tracing import enable_tracing
        from ..tracking.tracker import Tracker
        if isinstance(session.tracker, Tracker):  # a run id comes from MLflow's tracker only
            enable_tracing(session.tracker, workload.name)
    print(f"session {info.id} ({choice.kind}, budget {search.budget})", file=out or sys.stdout)
    return session


def resume_session(session_id: str, evaluation: EvaluationOptions, tracking: TrackingOptions) -> Session:
    """Open a stored session for resuming, with the search it was started with;
    raises FileNotFoundError or ProposerUnavailable."""
    from ..loop.session import session_dir, stored_info
    info = stored_info(tracking.store, session_id)
    directory = session_dir(tracking.store, session_id)
    # the workload may have changed since: checked again before the GPU is asked for
    preflight(load_workload(info.workload, info.shapes).timing_only(info.search.cases),
              timeout_s=evaluation.reference_timeout_s)
    choice = info.search.proposer
    if choice.prices and not Path(choice.prices).is_file():  # moved since the session started: go on unpriced by it
        print(f"warpsmith: warning: the session's price table {choice.prices} is gone; using the default prices",
              file=sys.stderr)
        info.search = replace(info.search, proposer=replace(choice, prices=""))
    session = open_session(info, directory, evaluation, tracking)
    if info.mlflow_run_id:
        session.tracker.reopen(info.mlflow_run_id)
    return session


def drive_session(session: Session, options: Optional[SessionOptions] = None, front_end: Optional[FrontEnd] = None,
                  out: Optional[TextIO] = None) -> int:
    """Run in the front end (which ends the session itself) or headless with a
    progress bar on `out`; however it ends, Ctrl-C and SIGTERM included, the end is
    recorded once (checkpoint kept, MLflow status, best kernel saved) and the GPU
    worker and checkpoint released. Returns the exit code."""
    from ..loop.headless import HeadlessProgress
    from ..loop.session import Ending
    out = out or sys.stdout
    ending = Ending("failed")  # what is recorded if the front end itself raises
    previous = _sigterm_stops(session)
    try:
        if front_end is not None:
            assert options is not None, "a front end runs a session with its options"
            try:
                ending = Ending(front_end(session, options))
            except KeyboardInterrupt:
                ending = Ending("stopped")
            except Exception as e:  # the app itself broke: the session's end is still recorded
                ending = Ending("failed", e)
        else:
            progress = HeadlessProgress(session.info.search.budget, "the fastest library per case", out)
            ending = session.run_to_end(progress)
        _say_why(ending, session.info.id)
    finally:
        session.end(ending.status)
        session.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if ending.status == "stopped":
        print(f"\nstopped. Resume with: warpsmith resume {session.info.id}", file=sys.stderr)
    if ending.status == "finished":
        best = (session.dir / "best" / "report.md")
        print(best.read_text() if best.is_file() else "no candidate passed validation", file=out)
        print(f"session {session.info.id}: best kernel in {session.dir / 'best'}", file=out)
    if ending.no_gpu:
        from .gpu_first import NO_GPU_EXIT
        return NO_GPU_EXIT
    return {"finished": 0, "stopped": 130, "paused": 0}.get(ending.status, 1)


def _say_why(ending: Ending, session_id: str) -> None:
    """One line for an end nobody asked for; nothing is lost."""
    if ending.error is None:
        return
    if ending.no_gpu:
        from .gpu_first import no_gpu_line
        print(no_gpu_line(ending.error), file=sys.stderr)
    elif ending.status == "stopped":  # the model cannot be used (a rejected key, ...)
        print(f"warpsmith: error: {ending.error}.", file=sys.stderr)
    else:  # reference.py raising, a dead worker pipe, ...
        print(f"warpsmith: error: {ending.text}. The checkpoint is kept: warpsmith resume {session_id}",
              file=sys.stderr)


def _sigterm_stops(session: Session) -> signal._HANDLER:
    """SIGTERM (a job scheduler, `kill`) is "stop now": the GPU work in flight is killed,
    a model call in flight abandoned (within 0.1 s), and the graph drains at the step
    boundary, so the checkpoint stays resumable (an exception raised from the handler
    could land inside a checkpoint write), the MLflow run is KILLED and the best kernel
    saved. Returns the handler it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop_now(signum: int, frame: Optional[FrameType]) -> None:
        session.stop_now()
    return signal.signal(signal.SIGTERM, stop_now)
