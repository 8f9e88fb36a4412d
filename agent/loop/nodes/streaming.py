"""The GPU side's progress, streamed to the front end as the loop's typed events while a
node waits on it: each call to the evaluator is given a sink made here (the evaluator
keeps none of its own).
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ...evaluate.attempt import EventSink
from ...evaluate.results import EvaluationResult, Status
from ...evaluate.stats import TimingStats
from ...runtime.compiler import CompiledKernel
from ...worker.protocol import CaseChecked, CaseTimed
from .. import events
from ..context import LoopContext


def case_events(runtime: Runtime[LoopContext], iteration: int, compiles: bool = False) -> EventSink:
    """A sink that forwards the worker's per-case replies as they arrive, under `iteration`;
    with `compiles`, the compile outcome too (an attempt's: evaluations outside one, such as
    a challenge's re-timings, compile kernels the session has seen already)."""
    write = runtime.stream_writer

    def on_event(reply: object) -> None:
        if isinstance(reply, CaseChecked):
            write(events.CaseFinished(iteration, reply.case, reply.phase, reply.check.status, reply.check.max_rel_error,
                                      elapsed_ms=reply.elapsed_ms))
        elif isinstance(reply, CaseTimed):
            write(events.CaseFinished(iteration, reply.case, "time", Status.OK, None, TimingStats.of(reply.samples_ms).median_ms,
                                      elapsed_ms=reply.elapsed_ms))
        elif isinstance(reply, CompiledKernel) and compiles:
            write(events.CompileFinished(iteration, reply.ok, reply.compile_ms, reply.resources.text(), reply.log,
                                         reply.cached))
    return on_event


def ran(runtime: Runtime[LoopContext], iteration: int, phase: str, r: EvaluationResult) -> None:
    runtime.stream_writer(events.EvaluatorRan(iteration, phase, r.began_s, r.wall_ms.get("total"), r.wall_ms.get("call")))
