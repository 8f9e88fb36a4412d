"""One GPU's actor in a Ray cluster: a worker process of Ray's holding one GPU and the
local evaluator on it, running the backend's calls one at a time and sending back the
worker's replies with each result.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Optional

from ..runtime.compiler import CompiledKernel
from ..runtime.device_facts import DeviceFacts
from ..spec.speed_of_light import Ceilings
from ..spec.workload_model import Workload
from .backend import EvaluationBackend
from .evaluator import Evaluator
from .options import EvaluationOptions

ACTOR_CALLS = frozenset({"evaluate", "baseline", "run_attempt"})  # what an actor runs for the backend

# (workload, options, worker log) -> the evaluator an actor holds; a module-level function, so Ray can ship it
EvaluatorFactory = Callable[[Workload, EvaluationOptions, Optional[Path]], Any]


def local_evaluator(workload: Workload, options: EvaluationOptions, worker_log: Optional[Path]) -> Evaluator:
    # Ray gives an actor its GPU through CUDA_VISIBLE_DEVICES: there it is device 0.
    return Evaluator(workload, dataclasses.replace(options, device=0), worker_log=worker_log)


class GpuActor:
    """In a Ray worker process that holds one GPU: its evaluator, one call at a time.
    Ray runs it with two threads so that abort() reaches the call in flight."""

    def __init__(self, index: int, factory: EvaluatorFactory, workload: Workload, options: EvaluationOptions,
                 worker_log: Optional[Path]):
        self.index = index
        self.evaluator: EvaluationBackend = factory(workload, options, worker_log)
        self._busy = False

    def facts(self) -> DeviceFacts:
        return self.evaluator.facts

    def ceilings(self) -> Optional[Ceilings]:
        return self.evaluator.ceilings

    def baseline_kinds(self) -> list[str]:
        return self.evaluator.baseline_kinds()

    def niceness(self) -> int:
        return os.nice(0)

    def label(self) -> str:
        facts = self.evaluator.facts
        return " ".join(p for p in (f"actor {self.index}:", facts.name, facts.uuid) if p)

    def call(self, name: str, arguments: tuple[Any, ...]) -> tuple[Any, list[object], str]:
        """evaluator.NAME(*arguments): its result, the replies it streamed on the way (sent
        back with the result: the backend passes them on to the caller's sink) and this
        GPU's label. The compile outcome is not among them: the driver compiled the kernel
        and streamed that itself, and a CUBIN need not travel back."""
        if name not in ACTOR_CALLS:
            raise ValueError(f"GpuActor: no call '{name}'")
        events: list[object] = []
        self._busy = True
        try:
            result = getattr(self.evaluator, name)(*arguments, on_event=events.append)
        finally:
            self._busy = False
        return result, [e for e in events if not isinstance(e, CompiledKernel)], self.label()

    def abort(self) -> None:
        """Kill the call in flight, if any (an idle actor keeps no flag for a later call).
        An abort that lands just as a call ends leaves the evaluator's flag set, so the
        actor's next call raises EvaluationAborted: harmless, as abort() comes only from
        "stop now" (Session.stop_now), after which the session makes no further call and
        its backend is closed; a resumed session starts new actors."""
        if self._busy:
            self.evaluator.abort()

    def close(self) -> None:
        self.evaluator.close()
