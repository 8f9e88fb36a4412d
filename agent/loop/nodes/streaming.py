"""The worker's per-case replies and each evaluator call, streamed to the front end as
typed events while a node waits on the GPU.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ...evaluate.results import EvaluationResult, Status
from ...evaluate.stats import TimingStats
from ...worker.protocol import CaseChecked, CaseTimed
from .. import events
from ..context import LoopContext


def stream_cases(runtime: Runtime[LoopContext], iteration: int) -> None:
    """Forward the worker's per-case replies as they arrive."""
    write = runtime.stream_writer

    def on_event(reply: object) -> None:
        if isinstance(reply, CaseChecked):
            write(events.CaseFinished(iteration, reply.case, reply.phase, reply.check.status, reply.check.max_rel_error,
                                      elapsed_ms=reply.elapsed_ms))
        elif isinstance(reply, CaseTimed):
            write(events.CaseFinished(iteration, reply.case, "time", Status.OK, None, TimingStats.of(reply.samples_ms).median_ms,
                                      elapsed_ms=reply.elapsed_ms))
    runtime.context.evaluator.on_event = on_event


def ran(runtime: Runtime[LoopContext], iteration: int, phase: str, r: EvaluationResult) -> None:
    runtime.stream_writer(events.EvaluatorRan(iteration, phase, r.began_s, r.wall_ms.get("total"), r.wall_ms.get("call")))
