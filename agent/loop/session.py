"""A session: one run of the loop over a workload, with an id, a run directory
(``STORE/sessions/ID``: the SQLite checkpoint, session.json, the best kernel)
and an MLflow run. It can be paused, stopped, resumed and re-budgeted."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, cast

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl

from ..evaluate.ahead import AttemptScheduler
from ..evaluate.backend import EvaluationBackend, parallel
from ..evaluate.results import Status
from ..profiling.nsight import Nsight
from ..proposers.base import Proposer, proposes_ahead
from ..runtime.device_facts import DeviceFacts
from ..spec.workload_model import Workload
from ..tracking.best_kernel import write_best
from ..tracking.session_tracker import SessionTracker
from .checkpoint_serde import RecordSaver
from .context import LoopContext
from .events import NodeFinished, SessionFinished
from .graph import LoopGraph, build_graph
from .legacy_nodes import continue_attempt
from .limits import Limits, Spent
from .options import SearchOptions
from .session_control import SessionControl
from .state import STATE_TAGS, LoopState
from .timeline import Timeline


def step_size(search: SearchOptions, evaluator: EvaluationBackend, proposer: Proposer) -> int:
    """Candidates proposed per step: --batch, and for the tuner on several GPUs (Ray) at
    least two per GPU, so that each GPU still has an attempt to run while the graph takes a
    step's results in order and the next step is proposed. The model's steps stay --batch:
    each of its proposals is a paid call. `--batch 1` and --no-overlap keep a sequential
    session: one attempt at a time, on one GPU."""
    several = parallel(evaluator)
    if several is not None and search.overlap and search.batch > 1 and proposes_ahead(proposer):
        return max(search.batch, 2 * several.lanes)
    return search.batch


@dataclass
class SessionInfo:
    """session.json: what `resume` needs to rebuild the session. No secrets. Its options
    are a frozen record; status and run id change as the session lives."""

    id: str
    workload: str  # directory
    search: SearchOptions = SearchOptions()
    mlflow_run_id: str = ""
    status: str = "running"  # running | paused | stopped | finished | failed
    created: float = field(default_factory=time.time)
    # the user's performance cases in place of the workload's own (Workload.shapes, `bench --shapes`)
    shapes: tuple[tuple[str, dict[str, int]], ...] = ()

    def save(self, directory: Path) -> None:
        data = {"id": self.id, "workload": self.workload, **self.search.stored(),
                "mlflow_run_id": self.mlflow_run_id, "status": self.status, "created": self.created,
                **({"shapes": [[name, sizes] for name, sizes in self.shapes]} if self.shapes else {})}
        (directory / "session.json").write_text(json.dumps(data, indent=2))

    @staticmethod
    def load(directory: Path) -> "SessionInfo":
        data = json.loads((directory / "session.json").read_text())
        shapes = tuple((str(name), {str(k): int(v) for k, v in sizes.items()}) for name, sizes in data.get("shapes", []))
        return SessionInfo(data["id"], data["workload"], SearchOptions.from_stored(data), data.get("mlflow_run_id", ""),
                           data.get("status", "stopped"), data.get("created", 0.0), shapes)


def new_session_id(workload: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{workload}-{uuid.uuid4().hex[:6]}"


SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # a date, a workload name (<= 64), a suffix


def session_dir(store: Path, session_id: str) -> Path:
    """The session's folder under the store. Raises FileNotFoundError (one line) for an
    id that could name anything else (`resume ../../x`): no path escapes the store."""
    if not SESSION_ID.fullmatch(session_id):
        raise FileNotFoundError(f"no session '{session_id[:80]}' under {store}/sessions (not a session id)")
    return Path(store) / "sessions" / session_id


def open_graph(directory: Path, conn: Optional[sqlite3.Connection] = None) -> LoopGraph:
    """The loop's graph compiled over a session directory's SQLite checkpoint."""
    conn = conn or sqlite3.connect(str(directory / "checkpoint.sqlite"), check_same_thread=False)
    # LangGraph's saver keeps the checkpoint in WAL mode and commits after every node, five
    # or six per attempt; SQLite's default (FULL) syncs the log at each commit. NORMAL syncs
    # it at the log's checkpoints: a killed process loses nothing, a power cut at most the
    # last commits, never the file.
    conn.execute("PRAGMA synchronous=NORMAL")
    saver = RecordSaver(conn, STATE_TAGS)  # each attempt and candidate stored once
    return build_graph().compile(checkpointer=saver)


def graph_config(session_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": session_id}, "recursion_limit": 1_000_000}


def stored_info(store: Path, session_id: str) -> SessionInfo:
    """A stored session's session.json. Raises FileNotFoundError (one line) if there is no such session."""
    directory = session_dir(store, session_id)
    if not (directory / "session.json").is_file():
        raise FileNotFoundError(f"no session '{session_id}' under {store}/sessions")
    return SessionInfo.load(directory)


def stored_session(store: Path, session_id: str) -> tuple["SessionInfo", LoopState]:
    """A stored session's info and last checkpointed state, read only.
    Raises FileNotFoundError (one line) if there is no such session."""
    info = stored_info(store, session_id)
    directory = session_dir(store, session_id)
    conn = sqlite3.connect(str(directory / "checkpoint.sqlite"), check_same_thread=False)
    try:
        return info, cast(LoopState, open_graph(directory, conn).get_state(graph_config(info.id)).values)
    finally:
        conn.close()  # not left to the GC: `bench` reads one per workload


def ended_text(state: LoopState) -> str:
    """Which limit ended the session (if one did) and what it spent."""
    spent = state.get("spent") or Spent()
    how = f"ended by the {state['finished']}" if state.get("finished") else "not finished"
    rejected = sum(a.status == Status.REJECTED_EARLY for a in state.get("history", []))
    early = f" ({rejected} rejected early: clearly slower than the best after their first launches)" if rejected else ""
    return (f"{how}; {state.get('iteration', 0)} attempts{early}, {spent.elapsed_s:.0f} s running, "
            f"{spent.tokens} model tokens, ${spent.cost_usd:.4f}")


class Session:
    """One lifecycle for every front end (`run`, `resume`, `bench`, the app): build it
    (agent/cli/sessions.py starts or resumes one), run_to_end() as often as it pauses,
    stop it from any thread with pause(), stop_after_step() or stop_now(), then end()
    records how it ended, exactly once, and close() releases the GPU worker and the
    checkpoint."""

    def __init__(self, info: SessionInfo, directory: Path, workload: Workload, evaluator: EvaluationBackend,
                 proposer: Proposer, tracker: SessionTracker, control: Optional[SessionControl] = None):
        self.info, self.dir, self.workload = info, directory, workload
        self.evaluator, self.proposer, self.tracker = evaluator, proposer, tracker
        self.control = control or SessionControl()
        directory.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(directory / "checkpoint.sqlite"), check_same_thread=False)
        self.graph = open_graph(directory, self._conn)
        self.config = graph_config(info.id)
        continue_attempt(self.graph, self.config)  # a session paused inside an attempt of the graph before
        self._ended: Optional[str] = None
        # A step of several candidates is evaluated ahead of the graph (agent/evaluate/ahead.py).
        self._ahead: Optional[AttemptScheduler] = None
        self._end_lock = threading.Lock()  # the app's thread and the CLI may both try to end it

    @property
    def state(self) -> LoopState:
        return cast(LoopState, self.graph.get_state(self.config).values)

    def has_checkpoint(self) -> bool:
        return bool(self.graph.get_state(self.config).next) or bool(self.state)

    def set_budget(self, budget: int) -> None:
        """While paused or stopped: write it into the checkpoint. While running, use
        control.set_budget. A finished session given more budget continues: the
        update is applied as reflect's, whose route then goes back to propose."""
        snapshot = self.graph.get_state(self.config)
        if snapshot.values and not snapshot.next and budget > snapshot.values.get("iteration", 0):
            self.graph.update_state(self.config, {"budget": budget, "finished": None}, as_node="reflect")
        else:
            self.graph.update_state(self.config, {"budget": budget})
        self.info.search = replace(self.info.search, budget=budget)
        self.info.save(self.dir)

    def set_limits(self, **changes: Optional[float]) -> None:
        """While paused or stopped (running: control.set_limits). A finished session whose
        limit is raised continues, as with set_budget."""
        snapshot = self.graph.get_state(self.config)
        limits = snapshot.values.get("limits", Limits()).merged(changes)
        update: dict[str, Any] = {"limits": limits}
        if snapshot.values and not snapshot.next:
            update["finished"] = None
            self.graph.update_state(self.config, update, as_node="reflect")
        else:
            self.graph.update_state(self.config, update)

    # -- stopping, from any thread -------------------------------------------
    def pause(self) -> None:
        """Pause at the next step boundary: run() returns "paused"; run it again to go on."""
        self.control.request("pause")

    def stop_after_step(self) -> None:
        """Stop at the next step boundary: run() returns "stopped"."""
        self.control.request("stop")

    def stop_now(self) -> None:
        """"Stop now" (the app's `x`, SIGTERM), from any thread or a signal handler: the
        GPU work in flight is killed and a model call in flight abandoned; run() then
        raises EvaluationAborted or ModelCallAborted, or returns "stopped" if the step
        boundary comes first. Either way the checkpoint is where the step began."""
        self.control.stop_now()
        (self._ahead or self.evaluator).abort()

    # -- running ----------------------------------------------------------------
    def run_to_end(self, on_event: Callable[[object], None] = lambda e: None) -> Ending:
        """run(), and however it stops, the way it ended: stopped (Ctrl-C, stop now, a
        model that cannot be used), failed (no GPU, reference.py raising, a dead worker
        pipe...) or what run() returned. Records nothing: end() does."""
        from ..evaluate.worker_channel import EvaluationAborted
        from ..proposers.llm import ProposerUnavailable
        from ..proposers.model_client import ModelCallAborted
        try:
            return Ending(self.run(on_event))
        except (KeyboardInterrupt, EvaluationAborted, ModelCallAborted):
            return Ending("stopped")
        except ProposerUnavailable as e:  # a rejected key: resumable once it is fixed
            return Ending("stopped", e)
        except Exception as e:
            return Ending("failed", e)

    def run(self, on_event: Callable[[object], None] = lambda e: None) -> str:
        """Run (or continue) until the budget is spent or a pause/stop is requested.
        Returns finished, paused or stopped. When it returns, everything it logged is in
        MLflow, and every event is in the session's timeline (agent/loop/timeline.py)."""
        timeline = Timeline(self.dir, on_event)
        try:
            return self._run(timeline)
        finally:
            timeline.close()
            self.tracker.flush()

    def _run(self, on_event: Callable[[object], None]) -> str:
        search = self.info.search
        profiler = Nsight(self.workload.directory, self.dir / "profiles") if search.nsight else None
        batch = step_size(search, self.evaluator, self.proposer)
        if batch > 1 and search.overlap and self._ahead is None:
            self._ahead = AttemptScheduler(self.evaluator)
        ctx = LoopContext(self.workload, self._ahead or self.evaluator, self.proposer, self.control, self.tracker,
                          profiler, self.dir / "attempts", early_reject=search.early_reject, batch=batch)
        snapshot = self.graph.get_state(self.config)
        fresh = not snapshot.values
        inputs = LoopState(iteration=0, budget=search.budget, history=[],
                           limits=search.limits, spent=Spent()) if fresh else None
        if not fresh and not snapshot.next:
            return self._finished(on_event)  # nothing left to do
        run_control = self.control.new_run()
        self.info.status = "running"
        self.info.save(self.dir)
        try:
            return self._stream(inputs, ctx, run_control, on_event)
        finally:
            ctx.proposals_ahead.close()  # a step proposed ahead and not taken: never in the checkpoint

    def _stream(self, inputs: Optional[LoopState], ctx: LoopContext, run_control: RunControl,
                on_event: Callable[[object], None]) -> str:
        try:
            for mode, chunk in self.graph.stream(inputs, self.config, context=ctx, control=run_control,
                                                 stream_mode=["custom", "updates"]):
                if mode == "custom":
                    on_event(chunk)
                else:
                    for node in chunk:
                        on_event(NodeFinished(node))
        except GraphDrained as e:
            if self._ahead is not None:  # the step's jobs not begun wait in the checkpoint's queue
                self._ahead.cancel()
            self.control.clear()
            if e.reason != "pause":
                return "stopped"
            self.save_best()  # a pause is not an end, and the process may not come back
            self.info.status = "paused"
            self.info.save(self.dir)
            return "paused"
        return self._finished(on_event)

    def _finished(self, on_event: Callable[[object], None]) -> str:
        best = self.state.get("best")
        on_event(SessionFinished(self.state.get("finished") or "finished", best.score_ms if best else None))
        return "finished"

    # -- the end ------------------------------------------------------------------
    def end(self, status: str) -> str:
        """Record how the session ended (finished, stopped, failed): its status in
        session.json, the best kernel (folder and MLflow), the MLflow run's status.
        Once: a later call records nothing and returns the first status."""
        with self._end_lock:
            if self._ended is not None:
                return self._ended
            self._ended = status
        self.info.status = status
        self.info.save(self.dir)
        self.save_best()
        self.tracker.end_session(status)
        return status

    @property
    def ended(self) -> Optional[str]:
        """How the session ended, once end() has recorded it."""
        return self._ended

    def save_best(self) -> Optional[dict[str, str]]:
        s = self.state
        best = s.get("best")
        if not best:
            return None
        files = write_best(self.dir / "best", self.workload, best, s.get("start"), s.get("baseline", {}),
                           s.get("baseline_score_ms"), DeviceFacts.from_dict(s.get("facts", {})), ended=ended_text(s),
                           dispatch=s.get("dispatch"), result=s.get("result"))
        self.tracker.log_best(files)
        return files

    def close(self) -> None:
        """Release the GPU worker and the checkpoint (the end, if any, is recorded already)."""
        if self._ahead is not None:
            self._ahead.close()
        self.evaluator.close()
        self._conn.close()


@dataclass(frozen=True)
class Ending:
    """How run_to_end() stopped: a status for end(), and the exception behind a stop or
    failure nobody asked for (None when it ended as asked)."""

    status: str  # finished | paused | stopped | failed
    error: Optional[BaseException] = None

    @property
    def no_gpu(self) -> bool:
        from ..worker.process import GpuUnavailable
        return isinstance(self.error, GpuUnavailable)

    @property
    def text(self) -> str:
        return f"{type(self.error).__name__}: {self.error}" if self.error is not None else ""
