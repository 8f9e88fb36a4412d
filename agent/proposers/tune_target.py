"""What the tuner tunes: the kernel it searches (tune_base), the names its configurations
take for people ("kernel@tag[K=V,...]", the tag a hash of the source), and which attempts
are its own on that kernel: those whose kernel and tag fields are the kernel's (a name is
built here, never parsed).
"""

from __future__ import annotations

from typing import Optional

from ..evaluate.records import Attempt, CandidateSpec
from ..spec.candidate import Candidate
from ..spec.kernel_source import Knob, parse_knobs
from ..spec.workload_model import KernelSpec
from .base import ProposalContext, ProposalError
from .compile_pool import defines_key, source_tag


def config_prefix(base: CandidateSpec) -> str:
    """What the names of a tuned kernel's configurations start with (and its searches' seeds
    are drawn from): its kernel and source tag."""
    return f"{base.kernel}@{base.tag}["


def config_name(base: CandidateSpec, label: str) -> str:
    return f"{config_prefix(base)}{label}]"


def same_kernel(record: Attempt | CandidateSpec, base: CandidateSpec) -> bool:
    """Whether an attempt or a proposal is a configuration of `base` (its kernel, this source)."""
    return record.kernel == base.kernel and record.tag == base.tag


def tune_base(ctx: ProposalContext, kernel: Optional[str], proposer: str) -> tuple[CandidateSpec, dict[str, Knob]]:
    """What to tune: `kernel` if given, else the best kernel if it declares knobs (an
    LLM's kernel included; not the starting kernel while the workload names a `[start]
    tune` kernel: the start is the simple point of comparison, the tune kernel the one its
    author measured fastest, and a slow start's attempts cost the most), else the
    workload's `[start] tune` kernel, else the one with the most knobs. Returned with its
    knob values stripped, so every knob is free."""
    start_only = ctx.best is not None and ctx.best.spec.proposer == "start" and bool(ctx.workload.tune)
    if ctx.best and parse_knobs(ctx.best.spec.source) and not kernel and not start_only:
        spec = ctx.best.spec
    else:
        kernels = ctx.workload.kernels
        if not kernels:
            raise ProposalError(f"{ctx.workload.name} ships no kernel to tune and the best so far (if any) "
                                "declares no knobs (// knob NAME: values); nothing to tune")
        kernel = kernel or ctx.workload.tune
        start = ctx.workload.start_kernel
        # No best yet (prepare(), during the plan): the kernel the first proposal will take,
        # the starting kernel where it has knobs, so what is compiled ahead is what is wanted.
        chosen: KernelSpec = kernels[kernel] if kernel else start if start is not None and start.knobs() \
            else max(kernels.values(), key=lambda k: len(k.knobs()))
        spec = CandidateSpec.from_candidate(Candidate.from_spec(chosen), proposer)
    knobs = parse_knobs(spec.source)
    if not knobs:
        raise ProposalError(f"no kernel of {ctx.workload.name} declares knobs (// knob NAME: values); nothing to tune")
    fixed = {k: v for k, v in spec.defines.items() if k not in knobs}
    return spec.model_copy(update={"name": spec.kernel, "tag": source_tag(spec.source), "defines": fixed}), knobs


def attempts_on(ctx: ProposalContext, base: CandidateSpec, proposer: str) -> list[Attempt]:
    """The tuner's attempts on one kernel (its source included)."""
    return [a for a in ctx.history if a.proposer == proposer and same_kernel(a, base)]


def in_flight_keys(ctx: ProposalContext, base: CandidateSpec) -> set[tuple[tuple[str, int], ...]]:
    """The configurations proposed already whose attempts have not finished (tried, for choosing)."""
    return {defines_key(s.defines) for s in ctx.in_flight if s.proposer == "tune" and same_kernel(s, base)}
