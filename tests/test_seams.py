"""The evaluator and the tracker are protocols (agent/evaluate/backend.py,
agent/tracking/session_tracker.py): the real ones and their stand-ins implement every
member themselves, with the protocol's parameters. mypy checks the classes that name the
protocol as their base; this checks the test double too, and that nothing falls back on
the protocol's empty bodies."""

from __future__ import annotations

import inspect
from typing import Optional

import pytest
from evaluator_double import EvaluatorDouble
from workload_factory import make_sgemm_workload

from warpsmith.agent.evaluate.ahead import AttemptScheduler
from warpsmith.agent.evaluate.backend import EvaluationBackend
from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.session_tracker import NullTracker, SessionTracker
from warpsmith.agent.tracking.tracker import Tracker


def _members(protocol: type) -> list[str]:
    own = set(vars(protocol)) | set(getattr(protocol, "__annotations__", {}))
    return sorted(m for m in own if not m.startswith("_"))


def mismatches(protocol: type, cls: type, instance: object) -> list[str]:
    """How `cls` (and an instance of it) departs from `protocol`."""
    found = []
    for name in _members(protocol):
        owner = next((c for c in cls.__mro__ if name in vars(c) and c is not protocol), None)
        want = vars(protocol).get(name)
        if want is None or isinstance(want, property):  # data: a class member or set on the instance
            if owner is None and name not in vars(instance):  # vars(): reading a property may start a GPU worker
                found.append(f"{name}: missing")
        elif owner is None:
            found.append(f"{name}: not implemented (the protocol's empty body)")
        else:
            shape = lambda f: [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]
            if shape(want) != shape(vars(owner)[name]):
                found.append(f"{name}: {inspect.signature(vars(owner)[name])} is not {inspect.signature(want)}")
    return found


@pytest.fixture
def workload(tmp_path):
    return load_workload(make_sgemm_workload(tmp_path / "w"))


def test_evaluators_implement_the_backend(workload):
    """The local Evaluator, the EvaluatorDouble and the scheduler of attempts ahead each implement every EvaluationBackend member, same parameters."""
    assert EvaluationBackend in Evaluator.__mro__  # named as its base: mypy checks it when it checks evaluator.py
    for cls, instance in ((Evaluator, Evaluator(workload)), (EvaluatorDouble, EvaluatorDouble(workload)),
                          (AttemptScheduler, AttemptScheduler(EvaluatorDouble(workload)))):
        assert mismatches(EvaluationBackend, cls, instance) == [], cls.__name__


def test_trackers_implement_the_session_tracker(tmp_path):
    """The MLflow Tracker and the NullTracker each implement every SessionTracker method, same parameters."""
    for cls, instance in ((Tracker, Tracker(tmp_path / "store")), (NullTracker, NullTracker())):
        assert SessionTracker in cls.__mro__
        assert mismatches(SessionTracker, cls, instance) == [], cls.__name__


def test_the_check_sees_a_departure():
    """The check is not vacuous: a missing method, a renamed parameter, a missing attribute are all found."""
    class Partial(EvaluationBackend):
        def evaluate(self, candidate, seed: int = 1, revalidate: bool = True, time_cases: bool = False):  # default differs
            raise NotImplementedError

        def baseline(self, seed: int = 1, flavour: Optional[str] = None):  # renamed
            raise NotImplementedError

    found = mismatches(EvaluationBackend, Partial, Partial())
    assert {f.split(":")[0] for f in found} == {"timing", "facts", "ceilings", "evaluate", "evaluate_many",
                                                "baseline", "baseline_kinds", "abort", "close", "run_attempt",
                                                "compile"}, found
