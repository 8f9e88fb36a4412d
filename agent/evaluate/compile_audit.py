"""A candidate compiled and audited, once: NVRTC (here, or where the caller sends it), then
every verdict the compiled code itself decides, before anything runs: state kept between
launches (the CUBIN's sections and what its machine code does with module data's
addresses), 16-bit accumulation on any path (the PTX), and the workload's precision policy
(the machine code's math and the PTX's narrow arithmetic), and the launch's constant bank
(the machine code's reads of it). The compile process refused already, for every caller, a
kernel whose PTX reaches its parameters other than by value."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..runtime.compiler import CompiledKernel, Nvrtc, compile_kernel, run_nvrtc
from ..runtime.cubin_audit import audit_cubin
from ..spec import precision_policy
from ..spec.candidate import Candidate


def compile_candidate(candidate: Candidate, arch: str, allow_fast_math: bool,
                      nvrtc: Nvrtc = run_nvrtc, wide_accumulation: bool = False,
                      narrow_allowed: Optional[frozenset[str]] = None) -> CompiledKernel:
    """NVRTC (here, or where `nvrtc` sends it), then the audits, each a refusal:

    - KERNEL_KEEPS_STATE: state kept between launches (the CUBIN's sections, and what its
      machine code does with module data's addresses);
    - SASS_UNAVAILABLE: machine code that could not be read (the next audits read it);
    - PARAMETER_ADDRESS: reads of the launch's constant bank other than its parameters by
      value and the launch's sizes, or the parameters' address used other than as a TMA
      descriptor (the SASS's);
    - HALF_ACCUMULATION: where the workload's policy accumulates in float32 or float64
      (`wide_accumulation`), 16-bit accumulating instructions on any path (the PTX's,
      agent/runtime/ptx_audit.py);
    - PRECISION_POLICY: given the narrower types the workload allows (`narrow_allowed`,
      agent/spec/precision_policy.py), machine code that multiplies or converts to any other.
    """
    compiled = compile_kernel(candidate.source, candidate.entry, arch, candidate.compile_options(),
                              filename=f"{candidate.name}.cu", allow_fast_math=allow_fast_math, nvrtc=nvrtc)
    refusal = audit_cubin(compiled.cubin).refusal(compiled.state_ops) if compiled.ok else ""
    if refusal:
        return dataclasses.replace(compiled, ok=False, error="KERNEL_KEEPS_STATE", log=refusal, cubin=b"")
    if compiled.ok and None in (compiled.sass_ops, compiled.param_ops, compiled.state_ops):
        return dataclasses.replace(compiled, ok=False, error="SASS_UNAVAILABLE", cubin=b"", log=(
            "the machine code, which the parameter, state and precision audits read, could not be read: "
            f"{compiled.sass_error or 'no SASS audit came back (run the same warpsmith version everywhere)'}"))
    if compiled.ok and compiled.param_ops:
        return dataclasses.replace(compiled, ok=False, error="PARAMETER_ADDRESS", cubin=b"", log=(
            "a kernel reads its launch's constant bank only at its own parameters and the launch's sizes, and uses "
            f"the parameters' address only as a TMA descriptor: {'; '.join(compiled.param_ops[:2])}; read parameters "
            "by value, and index a parameter array only by constants"))
    no_ptx = compiled.half_ops is None or (narrow_allowed is not None and compiled.narrow_ops is None)
    if compiled.ok and (wide_accumulation or narrow_allowed is not None) and no_ptx:
        return dataclasses.replace(compiled, ok=False, error="PTX_UNAVAILABLE", cubin=b"", log=(
            "NVRTC gave no PTX to audit, and the workload's precision policy is checked on it: run the "
            "same warpsmith version everywhere (a Ray cluster's workers too)"))
    if compiled.ok and wide_accumulation and compiled.half_ops:
        return dataclasses.replace(compiled, ok=False, error="HALF_ACCUMULATION", cubin=b"", log=(
            "the workload's precision policy accumulates in float32 ([tolerance] accumulate), and the kernel's "
            f"PTX accumulates in 16 bits: {', '.join(compiled.half_ops)}. Convert to float, add or fma in float "
            "(float32 accumulators in mma / wmma / wgmma), round to 16 bits once at the end; the 16-bit "
            "exp / log / sin / cos intrinsics, __hcmadd and bf16 __hmul_sat use 16-bit fma too: compute those "
            "in float"))
    if compiled.ok and narrow_allowed is not None:
        refusal = precision_policy.refusal(narrow_allowed, compiled.sass_ops or (), wide_accumulation,
                                           compiled.narrow_ops or ())
        if refusal:
            return dataclasses.replace(compiled, ok=False, error="PRECISION_POLICY", cubin=b"", log=refusal)
    return compiled
