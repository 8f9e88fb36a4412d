"""What the model is told: the workload, the GPU, the best kernel and its numbers
beside the baseline, the last failure verbatim and a compact history."""

from __future__ import annotations

from typing import Optional, Sequence

from ..evaluate.records import CandidateSpec, CaseProfile
from .base import ProposalContext

SYSTEM = """You write CUDA C++ kernels that are then compiled with NVRTC for one exact GPU \
architecture, validated against a float64 NumPy reference on every case (odd sizes included) \
and timed with CUDA events with a cold L2. You answer with data only: the kernel's source, \
its entry name, NVRTC options and a launch rule. Nothing you write is executed as Python.

Rules:
- The entry must be `extern "C" __global__` and take the parameters in exactly the order given.
- grid, block and shared are 1 to 3 arithmetic expressions over the case's sizes and the \
kernel's knobs: numbers, names, + - * / // %, ceil_div(a, b), round_up(a, b), min, max. \
Example: grid = ["ceil_div(N, BN)", "ceil_div(M, BM)"], block = ["(BM / TM) * (BN / TN)"].
- Knobs a tuner may search are declared in the source as `// knob NAME: v1 v2 v3` followed by \
`#ifndef NAME` / `#define NAME default` / `#endif`; launch expressions may use them.
- A candidate may be a program instead of one launch: `steps`, in order, each a launch (entry, grid, block, shared, args) or a memset ({"memset": NAME} zeroes a workspace buffer or an output), over `workspace` buffers you declare (name, dtype, size in elements as an expression, init "zero" or "poison"; poison is unpredictable, so write before you read). args name the parameters or workspace buffers in the kernel's order, or give a computed scalar as KIND:EXPR (i32:ceil_div(K, SPLITK)), or a TMA descriptor of an array parameter as tma:NAME:box=ROWS x COLS[:swizzle=128B] (an array of more than two dimensions is seen as 2-D, its leading dimensions flattened into rows: a box may run into the next head's rows, mask them; the runner encodes it; the kernel takes `const __grid_constant__ CUtensorMap`, declared as `struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };`). A step may set `cluster` (thread block cluster dimensions). Sources using wgmma or setmaxnreg compile for sm_90a. Every entry is `extern "C" __global__` in the one source. The whole sequence is validated and timed as one unit. Use it where one launch cannot fill the GPU (split-K for a long reduction, a multi-block row reduction and its finish).
- Correct for every size: guard every load and store. Never write outside the outputs or into inputs.
- Respect the precision policy: an fp32 workload that does not allow TF32 must be fp32-accurate \
(no plain tensor-core TF32, no reduced-precision tricks; an error-compensated split into TF32 pieces, \
3xTF32: big*big + big*small + small*big accumulated in fp32, is allowed; splits into 16-bit pieces \
(bf16, fp16) are not fp32-accurate and are not allowed). A bfloat16/float16 workload accumulates \
in the dtype its policy names (fp32 unless stated): tensor-core MMAs on 16-bit inputs with fp32 \
accumulators are fine, HADD2/HFMA2 sums are not; round to the output dtype once, at the end.
- NVRTC options are not nvcc's: no -O3; useful ones are -use_fast_math (only if the tolerance \
allows), -maxrregcount=N, -DNAME=VALUE.
Explain in `rationale`, in one or two sentences, what you changed and why it should be faster \
(or what you fixed)."""


# How a 16-bit or fp8 dtype reaches a kernel: its C type and header.
HALF_TYPES = {"bfloat16": "bfloat16 is __nv_bfloat16 (<cuda_bf16.h>)", "float16": "float16 is __half (<cuda_fp16.h>)",
              "float8_e4m3fn": "float8_e4m3fn is __nv_fp8_e4m3 (<cuda_fp8.h>)",
              "float8_e5m2": "float8_e5m2 is __nv_fp8_e5m2 (<cuda_fp8.h>)"}


def _fmt(ms: Optional[float]) -> str:
    return "-" if ms is None else f"{ms:.4f} ms"


def _program_lines(spec: CandidateSpec) -> list[str]:
    """A program's workspace and steps, for the prompt; nothing for one launch."""
    program = spec.to_candidate().program if spec.program else None
    return ["It is a program:", *program.describe()] if program else []


def _profile_lines(title: str, profile: Sequence[CaseProfile]) -> list[str]:
    if not profile:
        return []
    findings = list(dict.fromkeys(f for p in profile for f in p.findings))
    return (["", f"# {title}, one launch per case"] + [f"- {p.case}: {p.summary}" for p in profile]
            + ([f"What it suggests: {'; '.join(findings)}"] if findings else []))


def latest_findings(ctx: ProposalContext) -> list[str]:
    """The findings of the latest profile (the last attempt's, else the best's), for retrieval."""
    for source in (ctx.last, ctx.best):
        if source is not None and source.profile:
            return list(dict.fromkeys(f for p in source.profile for f in p.findings))
    return []


def user_message(ctx: ProposalContext, max_detail: int = 6000, max_history: int = 12, guidance: str = "") -> str:
    w, f = ctx.workload, ctx.facts
    parts = [f"# Workload {w.name}", w.description, "", f"Kernel parameters, in order: {w.signature()}", "",
             "Cases (all are validated; the score is the geometric mean of the performance medians):"]
    for c in w.cases:
        parts.append(f"- {c.name} ({c.role}): " + ", ".join(f"{k}={v}" for k, v in c.sizes.items()))
    t = w.tolerance
    parts.append(f"Precision: TF32 {'allowed' if t.allow_tf32 else 'NOT allowed'}; fast-math compile options "
                 f"{'allowed' if t.allow_fast_math else 'NOT allowed'}; reduction length {t.reduction or 1}.")
    half = sorted({a.dtype for a in w.arrays if a.dtype in HALF_TYPES})
    if half:
        parts.append(f"Narrow data: {', '.join(f'{a.name} {a.dtype}' for a in w.arrays)}; "
                     f"{' and '.join(HALF_TYPES[d] for d in half)}; accumulate in {t.accumulate or 'float32'} "
                     "(the precision policy: a kernel that accumulates in 16 bits fails it), round each output once.")
    if f.name or f.arch:  # a session stored without facts reads back all defaults: no GPU line
        parts += ["", f"# GPU: {f.name} ({f.arch}), {f.sm_count} SMs, "
                      f"{f.smem_per_block_optin // 1024} KiB shared memory per block (opt-in), "
                      f"{f.smem_per_sm // 1024} KiB per SM, {f.regs_per_sm} registers per SM, "
                      f"L2 {f.l2_bytes >> 20} MiB, peak memory bandwidth ~{f.peak_bandwidth_gbs:.0f} GB/s"]
    if guidance:
        parts += ["", "# Guidance (cite the [id] of any note you follow in your rationale)", guidance]
    if ctx.best:
        b = ctx.best
        parts += ["", f"# Best kernel so far: {b.spec.name} (score {_fmt(b.score_ms)}), entry {b.spec.entry}, "
                      f"grid {b.spec.grid}, block {b.spec.block}, shared {b.spec.shared}, defines {b.spec.defines}",
                  *_program_lines(b.spec),
                  "```cuda", b.spec.source.strip(), "```", "Per case (best vs baseline):"]
        for outcome in b.cases:
            if outcome.role == "performance":
                floor = f", {outcome.pct_of_floor:.0%} of the speed-of-light floor" if outcome.pct_of_floor else ""
                parts.append(f"- {outcome.case}: {_fmt(outcome.median_ms)} vs {_fmt(ctx.baseline.get(outcome.case))}{floor}")
        parts += _profile_lines("Nsight Compute on the best kernel", b.profile)
    last = ctx.last
    if last is not None and last.profile and not last.new_best:
        parts += _profile_lines(f"Nsight Compute on the last attempt ({last.name})", last.profile)
    if ctx.history:
        parts += ["", "# History (most recent last)"]
        for a in ctx.history[-max_history:]:
            parts.append(f"- #{a.iteration} {a.name} [{a.proposer}]: {a.status}"
                         + (f", {_fmt(a.score_ms)}" if a.score_ms else "") + (" (new best)" if a.new_best else ""))
    if ctx.mode == "repair" and ctx.last is not None:
        detail = ctx.last.detail.strip()
        if len(detail) > max_detail:
            detail = detail[:max_detail] + "\n... (truncated)"
        parts += ["", f"# The last attempt ({ctx.last.name}) failed: {ctx.last.status}. Fix it. Verbatim:",
                  "```", detail, "```"]
    elif ctx.best is None and ctx.workload.from_scratch and not ctx.history:
        parts += ["", "# Task: this workload has no starting kernel: write its first kernel from scratch. "
                      "Correct on every case first (guard every access), then fast."]
    else:
        parts += ["", "# Task: propose a faster correct kernel than the best so far."]
        if ctx.hint:  # one of several calls of a batch: each tries another idea
            parts.append(f"This time try this idea (other proposals try others): {ctx.hint}")
    return "\n".join(parts)
