"""What a candidate's PTX says about its accumulation: 16-bit adds, fused multiply-adds,
atomic adds and matrix instructions with 16-bit accumulators.

The precision policy ``accumulate = "float32"`` (the default where a workload has 16-bit
arrays: agent/spec/tolerance.py) is enforced on random inputs only where a reduction is
long enough to drift past the tolerance, and by the accumulation probe only on the path a
kernel takes at the probe's length (2^22): a kernel with a 16-bit running sum on its
short-row path and float32 on its long-row fallback passes both. The PTX shows every path
at once. NVRTC keeps the PTX a CUBIN was built from (a real architecture too); inline
assembly appears in it verbatim, and ptxas lowers no precision.

Refused where the policy holds (agent/evaluate/evaluator.py, compile_candidate):

- ``add`` / ``sub`` / ``fma`` on ``f16``, ``f16x2``, ``bf16``, ``bf16x2`` (``__hadd``,
  ``__hfma``, the 16-bit operators), the instructions a 16-bit running sum is made of;
- ``atom`` / ``red`` adds on those types (a 16-bit sum in memory);
- ``mma.sync`` and ``wgmma.mma_async`` whose accumulator (the D type, first after the
  shape and layouts) is ``f16`` (bf16 inputs accumulate in f32 only).

16-bit multiplies, conversions, compares, min / max and the like are allowed: none of
them accumulates. Not caught: a 16-bit running sum kept in float32 arithmetic with a
rounding to 16 bits after each add (``cvt`` round trips, which honest kernels use for
their outputs too) or integer emulation; the probe and the tolerance stay in place for
those. The result is instruction names only (never the PTX's operands or text), so the
compile cache keeps it beside the CUBIN and a refusal quotes nothing of the source.
"""

from __future__ import annotations

import re

_HALF = r"(?:f16|f16x2|bf16|bf16x2)"
_PATTERNS = (
    re.compile(rf"((?:add|sub|fma)(?:\.[a-z0-9]+)*\.{_HALF})$"),
    re.compile(rf"((?:atom|red)(?:\.[a-z0-9:]+)*\.add(?:\.[a-z0-9]+)*\.{_HALF})$"),
    re.compile(r"(mma\.sync\.aligned\.m\d+n\d+k\d+(?:\.(?:row|col))*\.f16)\."),
    re.compile(r"(wgmma\.mma_async(?:\.sp)?\.sync\.aligned\.m\d+n\d+k\d+\.f16)\."),
)
# A statement's start: labels and a guard predicate come before the instruction.
_LEAD = re.compile(r"^(?:[$%\w]+\s*:\s*)*(?:@!?%?\w+\s+)?")


def half_accumulation(ptx: str) -> tuple[str, ...]:
    """The distinct 16-bit accumulating instructions in `ptx` (their names, sorted).
    Statements are split at ';', braces and line ends: inline assembly may put several
    on one line, inside a scope of its own."""
    found: set[str] = set()
    code = re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", " ", ptx, flags=re.S))  # comments hide nothing
    for statement in re.split(r"[;{}\n]", code):
        words = _LEAD.sub("", statement.strip()).split(None, 1)
        if not words:
            continue
        opcode = words[0]
        for pattern in _PATTERNS:
            m = pattern.match(opcode)
            if m:
                found.add(m.group(1))
                break
    return tuple(sorted(found))
