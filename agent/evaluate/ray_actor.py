"""One GPU's actor in a Ray cluster: a worker process of Ray's holding one GPU and the
local evaluator on it, running the backend's calls one at a time and sending back the
worker's replies with each result.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Optional

from ..runtime.device_facts import DeviceFacts
from ..spec.speed_of_light import Ceilings
from ..spec.workload_model import Workload
from .backend import EvaluationBackend
from .evaluator import Evaluator
from .options import EvaluationOptions
from .results import EvaluationResult

ACTOR_CALLS = frozenset({"evaluate", "validate", "benchmark", "baseline", "attempt"})  # what an actor runs for the backend

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
        self._events: list[object] = []
        self.evaluator.on_event = lambda event: self._events.append(event)
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

    def call(self, name: str, arguments: tuple[Any, ...]) -> tuple[tuple[Optional[EvaluationResult], ...], tuple[list[object], ...], str]:
        """evaluator.NAME(*arguments), with the replies it streamed on the way (sent back
        with the result: the backend passes them on) and this GPU's label. "attempt" is
        validate, then benchmark when it passed: two results, each with its replies."""
        if name not in ACTOR_CALLS:
            raise ValueError(f"GpuActor: no call '{name}'")
        self._events, self._busy = [], True
        try:
            if name != "attempt":
                return (getattr(self.evaluator, name)(*arguments),), (self._events,), self.label()
            candidate, seed, best_ms, case_best_ms = arguments
            validated = self.evaluator.validate(candidate, seed, best_ms=best_ms, case_best_ms=case_best_ms)
            validate_events, self._events = self._events, []
            benchmarked = self.evaluator.benchmark(candidate, seed, best_ms=best_ms, case_best_ms=case_best_ms) \
                if validated.ok else None
            return (validated, benchmarked), (validate_events, self._events), self.label()
        finally:
            self._busy = False

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
