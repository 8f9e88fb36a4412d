"""Which of a tuned kernel's configurations are worth a compile: not refused by the
source's own `#if ... #error` guards, and launchable on enough of the workload's cases to
be judged. Cached per configuration: best-first asks again for the neighbours of every
scored point on each proposal.
"""

from __future__ import annotations

from typing import Optional

from ..evaluate.records import CandidateSpec
from ..spec.applicability import coverage_gap, malformed, serves
from ..spec.expr import ExprError
from ..spec.kernel_source import parse_knobs
from ..spec.knob_space import KnobSpace
from ..spec.workload_model import Workload
from .compile_pool import defines_key, source_tag


class LaunchFilter:
    """The tuner's verdicts on its configurations before any compile, kept for the session."""

    def __init__(self) -> None:
        # (workload digest, source tag, defines) -> the cases it serves (none: not launchable)
        self._served_cases: dict[tuple[str, str, tuple[tuple[str, int], ...]], frozenset[str]] = {}
        # source tag -> its knobs' #error restrictions and their defaults
        self._spaces: dict[str, tuple[KnobSpace, dict[str, int]]] = {}

    def allows(self, workload: Workload, base: CandidateSpec, defines: dict[str, int],
               case: Optional[str] = None) -> bool:
        """Launchable (see _served), and where `case` is given, applicable to that case: on
        another kernel's turn for a focus case, a point that cannot serve it is skipped."""
        key = (workload.digest, source_tag(base.source), defines_key({**base.defines, **defines}))
        if key not in self._served_cases:
            self._served_cases[key] = self._served(workload, base, defines) if self._allowed(base, defines) \
                else frozenset()
        served = self._served_cases[key]
        return bool(served) and (case is None or case in served)

    def _allowed(self, base: CandidateSpec, defines: dict[str, int]) -> bool:
        """Not refused by one of the source's `#if ... #error` pairs (agent/spec/knob_space.py):
        such a point is skipped without a compile. One the reader cannot judge is allowed,
        and NVRTC decides as before."""
        tag = source_tag(base.source)
        try:
            if tag not in self._spaces:
                self._spaces[tag] = (KnobSpace.from_source(base.source, lenient=True),
                                     {k: kn.default for k, kn in parse_knobs(base.source).items()})
            space, defaults = self._spaces[tag]
            return space.allows({**defaults, **base.defines, **defines})
        except Exception:  # noqa: BLE001 - a model's source this reader cannot judge: NVRTC decides
            return True

    @staticmethod
    def _served(workload: Workload, base: CandidateSpec, defines: dict[str, int]) -> frozenset[str]:
        """The cases a configuration serves (agent/spec/applicability.py: every launch at least a
        warp, within CUDA's limits, its workspace in range), or none at all where it would not
        be judged: it must serve a correctness case and a performance case."""
        try:
            cand = base.model_copy(update={"defines": {**base.defines, **defines}}).to_candidate()
        except (ExprError, ValueError):
            return frozenset()
        if malformed(workload, cand):
            return frozenset()
        served = [c for c in workload.cases if serves(workload, cand, c)]
        return frozenset() if coverage_gap(c.role for c in served) else frozenset(c.name for c in served)

