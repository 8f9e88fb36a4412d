"""A candidate kernel: CUDA C++ source, entry, compile options, knob values and a
launch rule (numbers or arithmetic over the case's sizes and the knobs), or a
program of several launches over workspace buffers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..runtime.compile_policy import define_options
from .kernel_source import parse_knobs
from .launch import LaunchRule, Program
from .workload_model import Case, KernelSpec


@dataclass(frozen=True)
class Candidate:
    """A kernel ready to judge: its launch arithmetic parsed (and so checked against the
    whitelist), options as the compiler takes them. Its twin ``CandidateSpec``
    (agent/evaluate/records.py) is the same kernel as text, the form a model answers in
    and a checkpoint stores, with who proposed it and why; it stays apart because the
    stored form must not change when parsing does, and spec/ cannot import evaluate/.
    ``CandidateSpec.to_candidate`` parses it, ``from_candidate`` writes it back."""

    source: str
    entry: str
    launch: LaunchRule
    options: tuple[str, ...] = ()
    defines: dict[str, int] = field(default_factory=dict)  # knob overrides
    name: str = "candidate"
    # A rule for particular cases, where one rule does not fit all sizes.
    case_launch: dict[str, LaunchRule] = field(default_factory=dict)
    program: Optional[Program] = None  # several launches and workspace (agent/spec/launch.py); `launch` unused then

    @staticmethod
    def from_spec(spec: KernelSpec, defines: Optional[dict[str, int]] = None, source: Optional[str] = None) -> "Candidate":
        return Candidate(source if source is not None else spec.source(), spec.entry, spec.launch,
                         spec.options, {**spec.defines, **(defines or {})}, spec.name, program=spec.program)

    def knob_values(self) -> dict[str, int]:
        """Every knob's effective value: declared default, overridden by defines."""
        values = {k.name: k.default for k in parse_knobs(self.source).values()}
        return {**values, **self.defines}

    def compile_options(self) -> list[str]:
        return list(self.options) + define_options(self.defines)

    def launch_env(self, case: Case) -> dict[str, int]:
        return {**case.sizes, **self.knob_values()}

    def rule_for(self, case: Case) -> LaunchRule:
        return self.case_launch.get(case.name, self.launch)
