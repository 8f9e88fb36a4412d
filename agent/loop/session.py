"""A session: one run of the loop over a workload, with an id, a run directory
(``STORE/sessions/ID``: the SQLite checkpoint, session.json, the best kernel)
and an MLflow run. It can be paused, stopped, resumed and re-budgeted."""

from __future__ import annotations

import json
import re
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.errors import GraphDrained

from ..evaluate.backend import EvaluationBackend
from ..profiling.nsight import Nsight
from ..proposers.base import Proposer
from ..runtime.device_facts import DeviceFacts
from ..spec.workload import Workload
from ..tracking.best_kernel import write_best
from ..tracking.session_tracker import SessionTracker
from .events import NodeFinished
from .graph import LoopContext, build_graph
from .legacy_names import register as register_legacy_names
from .limits import Limits, Spent
from .session_control import SessionControl
from .state import STATE_TYPES, LoopState


@dataclass
class SessionInfo:
    """session.json: what `resume` needs to rebuild the session. No secrets."""

    id: str
    workload: str  # directory
    proposer: str
    budget: int
    seed: int = 0
    kernel: str = ""  # the workload kernel the tuner searches ("" = the one with most knobs)
    model: str = ""
    reasoning_effort: str = ""
    base_url: str = ""
    research: bool = False  # --nvidia-research
    web_search: bool = False  # --web-search (with --nvidia-research)
    nsight: bool = False  # --use-nsight
    limits: dict = field(default_factory=dict)  # the limits it started with (time_s, tokens, cost_usd, patience)
    prices: str = ""  # --prices FILE
    cases: list = field(default_factory=list)  # --cases: the performance cases timed ([] = all)
    mlflow_run_id: str = ""
    status: str = "running"  # running | paused | stopped | finished | failed
    created: float = field(default_factory=time.time)

    def save(self, directory: Path) -> None:
        (directory / "session.json").write_text(json.dumps(self.__dict__, indent=2))

    @staticmethod
    def load(directory: Path) -> "SessionInfo":
        return SessionInfo(**json.loads((directory / "session.json").read_text()))


def new_session_id(workload: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{workload}-{uuid.uuid4().hex[:6]}"


SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # a date, a workload name (<= 64), a suffix


def session_dir(store: Path, session_id: str) -> Path:
    """The session's folder under the store. Raises FileNotFoundError (one line) for an
    id that could name anything else (`resume ../../x`): no path escapes the store."""
    if not SESSION_ID.fullmatch(session_id):
        raise FileNotFoundError(f"no session '{session_id[:80]}' under {store}/sessions (not a session id)")
    return Path(store) / "sessions" / session_id


def open_graph(directory: Path, conn: Optional[sqlite3.Connection] = None):
    """The loop's graph compiled over a session directory's SQLite checkpoint."""
    conn = conn or sqlite3.connect(str(directory / "checkpoint.sqlite"), check_same_thread=False)
    register_legacy_names()  # sessions stored before the subpackages name agent.loop_state.Best...
    saver = SqliteSaver(conn, serde=JsonPlusSerializer(allowed_msgpack_modules=STATE_TYPES))
    return build_graph().compile(checkpointer=saver)


def graph_config(session_id: str) -> dict:
    return {"configurable": {"thread_id": session_id}, "recursion_limit": 1_000_000}


def stored_session(store: Path, session_id: str) -> tuple["SessionInfo", LoopState]:
    """A stored session's info and last checkpointed state, read only.
    Raises FileNotFoundError (one line) if there is no such session."""
    directory = session_dir(store, session_id)
    if not (directory / "session.json").is_file():
        raise FileNotFoundError(f"no session '{session_id}' under {store}/sessions")
    info = SessionInfo.load(directory)
    conn = sqlite3.connect(str(directory / "checkpoint.sqlite"), check_same_thread=False)
    try:
        return info, open_graph(directory, conn).get_state(graph_config(info.id)).values
    finally:
        conn.close()  # not left to the GC: `bench` reads one per workload


def ended_text(state: LoopState) -> str:
    """Which limit ended the session (if one did) and what it spent."""
    spent = state.get("spent") or Spent()
    how = f"ended by the {state['finished']}" if state.get("finished") else "not finished"
    return (f"{how}; {state.get('iteration', 0)} attempts, {spent.elapsed_s:.0f} s running, "
            f"{spent.tokens} model tokens, ${spent.cost_usd:.4f}")


class Session:
    def __init__(self, info: SessionInfo, directory: Path, workload: Workload, evaluator: EvaluationBackend,
                 proposer: Proposer, tracker: SessionTracker, control: Optional[SessionControl] = None):
        self.info, self.dir, self.workload = info, directory, workload
        self.evaluator, self.proposer, self.tracker = evaluator, proposer, tracker
        self.control = control or SessionControl()
        directory.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(directory / "checkpoint.sqlite"), check_same_thread=False)
        self.graph = open_graph(directory, self._conn)
        self.config = graph_config(info.id)

    @property
    def state(self) -> LoopState:
        return self.graph.get_state(self.config).values

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
        self.info.budget = budget
        self.info.save(self.dir)

    def set_limits(self, **changes) -> None:
        """While paused or stopped (running: control.set_limits). A finished session whose
        limit is raised continues, as with set_budget."""
        snapshot = self.graph.get_state(self.config)
        limits = snapshot.values.get("limits", Limits()).merged(changes)
        update = {"limits": limits}
        if snapshot.values and not snapshot.next:
            update["finished"] = None
            self.graph.update_state(self.config, update, as_node="reflect")
        else:
            self.graph.update_state(self.config, update)

    def stop_now(self) -> None:
        """"Stop now" (the app's `x`, SIGTERM), from any thread or a signal handler: the
        GPU work in flight is killed and a model call in flight abandoned; run() then
        raises EvaluationAborted or ModelCallAborted, or returns "stopped" if the step
        boundary comes first. Either way the checkpoint is where the step began."""
        self.control.stop_now()
        self.evaluator.abort()

    def run(self, on_event: Callable[[object], None] = lambda e: None) -> str:
        """Run (or continue) until the budget is spent or a pause/stop is requested.
        Returns the session's status: finished, paused or stopped. When it returns,
        everything it logged is in MLflow."""
        try:
            return self._run(on_event)
        finally:
            self.tracker.flush()

    def _run(self, on_event: Callable[[object], None]) -> str:
        profiler = Nsight(self.workload.directory, self.dir / "profiles") if self.info.nsight else None
        ctx = LoopContext(self.workload, self.evaluator, self.proposer, self.control, self.tracker, profiler,
                          self.dir / "attempts")
        snapshot = self.graph.get_state(self.config)
        fresh = not snapshot.values
        inputs = {"iteration": 0, "budget": self.info.budget, "history": [],
                  "limits": Limits().merged(self.info.limits), "spent": Spent()} if fresh else None
        if not fresh and not snapshot.next:
            return self._finish("finished", on_event)  # nothing left to do
        run_control = self.control.new_run()
        self.info.status = "running"
        self.info.save(self.dir)
        try:
            for mode, chunk in self.graph.stream(inputs, self.config, context=ctx, control=run_control,
                                                 stream_mode=["custom", "updates"]):
                if mode == "custom":
                    on_event(chunk)
                else:
                    for node in chunk:
                        on_event(NodeFinished(node))
        except GraphDrained as e:
            self.control.clear()
            status = "paused" if e.reason == "pause" else "stopped"
            self.save_best()
            self.info.status = status
            self.info.save(self.dir)
            return status
        return self._finish("finished", on_event)

    def _finish(self, status: str, on_event) -> str:
        from .events import SessionFinished
        self.save_best()
        self.info.status = status
        self.info.save(self.dir)
        best = self.state.get("best")
        on_event(SessionFinished(self.state.get("finished") or status, best.score_ms if best else None))
        return status

    def save_best(self) -> Optional[dict]:
        s = self.state
        best = s.get("best")
        if not best:
            return None
        files = write_best(self.dir / "best", self.workload, best, s.get("start"), s.get("baseline", {}),
                           s.get("baseline_score_ms"), DeviceFacts.from_dict(s.get("facts", {})), ended=ended_text(s))
        self.tracker.log_best(files)
        return files

    def close(self) -> None:
        self._conn.close()
