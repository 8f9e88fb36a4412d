"""A workload's precision policy in machine-code terms: the narrower number types its
kernels may multiply on the tensor cores or convert to, judged on the SASS
(agent/runtime/sass.py) so that no source, header or inline assembly can hide them.

Allowed are the types of the workload's own arrays (bfloat16 inputs: BF16 tensor-core
math and conversions to bfloat16), TF32 where ``allow_tf32`` relaxes the tolerance, and
the input type of each error-compensated split the workload names (``splits =
["3xTF32"]``): a float32 workload without one has no narrower type at all, so a kernel
that splits its operands into 16-bit pieces, or rounds them to fp8, is refused by name
before it runs, whatever inputs it would have been validated on. Where the policy
accumulates in float32 or wider, a tensor-core instruction with a 16-bit accumulator is
refused too. The PTX audit (agent/runtime/ptx_audit.py) still judges 16-bit adds and
fmas outside the tensor cores, which the SASS cannot tell from the compiler's own
idioms (``HFMA2.MMA`` moving a constant).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from .workload import Workload

# Split name -> the narrower tensor-core input type it works in.
SPLITS = {"3xTF32": "TF32", "3xBF16": "BF16", "3xF16": "F16"}
# SASS type token of each array dtype narrower than float32 (or not a float at all).
SASS_TYPE = {"float16": "F16", "bfloat16": "BF16", "int8": "S8", "uint8": "U8"}
NARROW = frozenset({"F16", "BF16", "TF32", "E4M3", "E5M2", "E2M1", "E2M3", "E3M2", "UE8M0",
                    "S8", "U8", "S4", "U4", "B1"})
_MATH = ("HMMA", "HGMMA", "QMMA", "QGMMA", "IMMA", "IGMMA", "BMMA", "BGMMA", "OMMA")


def allowed_types(workload: Workload) -> frozenset[str]:
    types = {SASS_TYPE[a.dtype] for a in workload.arrays if a.dtype in SASS_TYPE}
    if workload.tolerance.allow_tf32:
        types.add("TF32")
    types.update(SPLITS[s] for s in workload.tolerance.splits)
    return frozenset(types)


def narrow_types(op: str) -> frozenset[str]:
    """The narrower-than-float32 types an instruction multiplies or converts to.
    ``HMMA.16816.F32.BF16`` -> BF16; ``HMMA.16816.F32`` and ``HMMA.16816.F16`` -> F16
    (16-bit half inputs are the form without a type); ``QGMMA.64x128x32.F32.E4M3.E4M3``
    -> E4M3; ``F2FP.SATFINITE.E4M3.F32.PACK_AB`` -> E4M3 (a conversion's result is its
    first type); ``F2F.F64.F32`` -> none (a widening)."""
    family, *mods = op.split(".")
    types = [m for m in mods if m in NARROW or m in ("F32", "F64")]
    if family in ("F2FP", "F2F"):
        return frozenset(types[:1]) & NARROW
    found = frozenset(types) & NARROW
    if family in ("HMMA", "HGMMA") and not found & {"BF16", "TF32"}:
        return frozenset({"F16"})
    return found


def accumulator(op: str) -> str:
    """A tensor-core instruction's accumulator type: its first type modifier (``F32`` in
    ``HMMA.16816.F32.BF16``, ``F16`` in ``HMMA.16816.F16``); '' for other instructions."""
    family, *mods = op.split(".")
    if family not in _MATH:
        return ""
    return next((m for m in mods if m in NARROW or m in ("F32", "F64", "S32")), "")


def refusal(allowed: frozenset[str], ops: Iterable[str], wide_accumulation: bool) -> str:
    """One line naming the instructions a policy allowing `allowed` (allowed_types) forbids, or ''."""
    ops = tuple(ops)
    narrower = [op for op in ops if narrow_types(op) - allowed]
    half_acc = [op for op in ops if wide_accumulation and accumulator(op) in ("F16", "BF16")]
    if not narrower and not half_acc:
        return ""
    parts = []
    if narrower:
        kinds = sorted(set().union(*(narrow_types(op) - allowed for op in narrower)))
        parts.append(f"{', '.join(narrower[:4])} compute in {'/'.join(kinds)}, which the workload does not allow "
                     f"(it allows {'/'.join(sorted(allowed)) or 'no type narrower than float32'}: its arrays' "
                     "dtypes, [tolerance] allow_tf32 and the splits it names, e.g. splits = [\"3xTF32\"])")
    if half_acc:
        parts.append(f"{', '.join(half_acc[:4])} accumulate in 16 bits where the policy accumulates in float32 "
                     "([tolerance] accumulate): use float32 accumulators")
    return "the precision policy, read from the machine code: " + "; ".join(parts)
