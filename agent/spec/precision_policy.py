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
refused too (``QGMMA.64x128x32.F16.E4M3.E4M3``, ``HMMA.16816.F16``).

An allowed type's exact widenings (WIDENINGS: every fp8 value is a float16 and a
bfloat16 value) are allowed where they lose nothing: as the result of a conversion from
the allowed type, as a conversion's source, and as tensor-core inputs, whose products
are exact in a float32 accumulator. sm_90 has no fp8 ``mma.sync``: its machine code
widens e4m3 to float16 (``F2FP.F16.E4M3.UNPACK_B``) and multiplies with
``HMMA.16816.F32``. A conversion to the widening from anything else
(``F2FP.F16.F32.PACK_AB``) and ALU arithmetic in it (the PTX's ``mul.f16``) stay refused,
so float16 values in such a kernel can only be widened inputs.

The PTX audit (agent/runtime/ptx_audit.py) still judges 16-bit adds and fmas outside
the tensor cores, which the SASS cannot tell from the compiler's own idioms
(``HFMA2.MMA`` moving a constant).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from .workload_model import Workload

# Split name -> the narrower tensor-core input type it works in.
SPLITS = {"3xTF32": "TF32", "3xBF16": "BF16", "3xF16": "F16"}
# SASS type token of each array dtype narrower than float32 (or not a float at all).
SASS_TYPE = {"float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "E4M3", "float8_e5m2": "E5M2", "int8": "S8",
             "uint8": "U8"}
# Narrow type -> the narrow types that hold each of its values exactly.
WIDENINGS = {"E4M3": frozenset({"F16", "BF16"}), "E5M2": frozenset({"F16", "BF16"})}
NARROW = frozenset({"F16", "BF16", "TF32", "E4M3", "E5M2", "E2M1", "E2M3", "E3M2", "UE8M0",
                    "S8", "U8", "S4", "U4", "S16", "U16", "B1"})
_MATH = ("HMMA", "HGMMA", "QMMA", "QGMMA", "IMMA", "IGMMA", "BMMA", "BGMMA", "OMMA")
_REDUCTIONS = ("RED", "REDG", "REDAS", "ATOM", "ATOMG", "ATOMS", "UBLKRED")  # add in memory, in their type


def allowed_types(workload: Workload) -> frozenset[str]:
    types = {SASS_TYPE[a.dtype] for a in workload.arrays if a.dtype in SASS_TYPE}
    if workload.tolerance.allow_tf32:
        types.add("TF32")
    types.update(SPLITS[s] for s in workload.tolerance.splits)
    return frozenset(types)


_FLOATS = frozenset({"F16", "BF16", "TF32", "E4M3", "E5M2", "E2M1", "E2M3", "E3M2", "UE8M0"})
_INTS = frozenset({"S8", "U8", "S4", "U4", "S16", "U16"})
# A tensor-core family whose opcode names no type (BMMA.168256.AND.POPC) is taken at the
# narrowest type it can mean: what is not named cannot be allowed by a name.
_UNNAMED = {"BMMA": "B1", "BGMMA": "B1", "IMMA": "S8", "IGMMA": "S8", "QMMA": "E4M3", "QGMMA": "E4M3",
            "OMMA": "E2M1"}


def widened(allowed: frozenset[str]) -> frozenset[str]:
    """The exact widenings of the allowed types that are not allowed themselves."""
    return frozenset().union(*(WIDENINGS.get(t, frozenset()) for t in allowed)) - allowed


def _sass_exempt(op: str, allowed: frozenset[str]) -> frozenset[str]:
    """The widened types `op` may hold: all of them in tensor-core math; in a conversion,
    the result when its source (the second type) is allowed and the result widens it."""
    family, *mods = op.split(".")
    if family in _MATH:
        return widened(allowed)
    if family in ("F2FP", "F2F"):
        types = [m for m in mods if m in NARROW or m in ("F32", "F64")]
        if len(types) >= 2 and types[1] in allowed and types[0] in WIDENINGS.get(types[1], frozenset()):
            return frozenset(types[:1])
    return frozenset()


def _ptx_exempt(name: str, allowed: frozenset[str]) -> frozenset[str]:
    """As _sass_exempt, for the PTX's narrow arithmetic: tensor-core math; a ``cvt``'s
    sources (``cvt.f32.f16``) and its result when that widens an allowed source
    (``cvt.rn.f16x2.e4m3x2``)."""
    base, *mods = name.split(".")
    wide = widened(allowed)
    if base in ("mma", "wmma", "wgmma"):
        return wide
    if base != "cvt":
        return frozenset()
    types = [m for m in mods if m in PTX_TYPES or m in ("f32", "f64")]
    if not types:
        return frozenset()
    result, sources = PTX_TYPES.get(types[0]), {PTX_TYPES.get(t) for t in types[1:]}
    exempt = {t for t in sources if t in wide}
    if result in wide and any(t in allowed and result in WIDENINGS.get(t, frozenset()) for t in sources if t):
        exempt.add(result)
    return frozenset(exempt)


def narrow_types(op: str) -> frozenset[str]:
    """The narrower-than-float32 types an instruction multiplies or converts to.
    ``HMMA.16816.F32.BF16`` -> BF16; ``HMMA.16816.F32`` and ``HMMA.16816.F16`` -> F16
    (16-bit half inputs are the form without a type); ``QGMMA.64x128x32.F32.E4M3.E4M3``
    -> E4M3; ``BMMA.168256.AND.POPC`` -> B1; ``F2FP.SATFINITE.E4M3.F32.PACK_AB`` -> E4M3 (a
    conversion's result is its first type); ``F2F.F64.F32`` -> none (a widening);
    ``I2F.F16.S64`` -> F16 (the float made; its integer source is no narrowing);
    ``F2I.S8.NTZ`` -> S8; ``IDP.4A.S8.S8`` -> S8."""
    family, *mods = op.split(".")
    if family in ("F2FP", "F2F"):
        types = [m for m in mods if m in NARROW or m in ("F32", "F64")]
        return frozenset(types[:1]) & NARROW
    if family == "I2F":
        return frozenset(m for m in mods if m in _FLOATS)
    if family == "F2I":
        return frozenset(m for m in mods[:1] if m in _INTS)
    if family == "IDP":
        return frozenset(m for m in mods if m in _INTS) or frozenset({"S8"})
    if family in _REDUCTIONS:  # REDG.E.ADD.BF16x2.RN, ATOMS.CAST.SPIN... : the type, without its lane count
        return frozenset(re.sub(r"x\d+$", "", m) for m in mods) & NARROW
    found = frozenset(mods) & NARROW
    if family in ("HMMA", "HGMMA") and not found & {"BF16", "TF32"}:
        return frozenset({"F16"})
    if family in _UNNAMED and not found:
        return frozenset({_UNNAMED[family]})
    return found


# The PTX's narrow arithmetic (agent/runtime/ptx_audit.py's narrow_math) by type modifier.
PTX_TYPES = {"f16": "F16", "f16x2": "F16", "bf16": "BF16", "bf16x2": "BF16", "tf32": "TF32", "e4m3": "E4M3",
             "e4m3x2": "E4M3", "e5m2": "E5M2", "e5m2x2": "E5M2", "s8": "S8", "u8": "U8"}


def ptx_types(name: str) -> frozenset[str]:
    """``mul.rn.bf16x2`` -> BF16; ``cvt.rna.tf32.f32`` -> TF32; ``dp4a.s32.s32`` -> S8."""
    base, *mods = name.split(".")
    if base in ("dp4a", "dp2a"):
        return frozenset({"S8"})
    return frozenset(PTX_TYPES[m] for m in mods if m in PTX_TYPES)


def accumulator(op: str) -> str:
    """A tensor-core instruction's accumulator type: its first type modifier (``F32`` in
    ``HMMA.16816.F32.BF16``, ``F16`` in ``HMMA.16816.F16``); '' for other instructions."""
    family, *mods = op.split(".")
    if family not in _MATH:
        return ""
    return next((m for m in mods if m in NARROW or m in ("F32", "F64", "S32")), "")


def refusal(allowed: frozenset[str], ops: Iterable[str], wide_accumulation: bool,
            ptx_math: Iterable[str] = ()) -> str:
    """One line naming the instructions a policy allowing `allowed` (allowed_types) forbids,
    from the SASS opcodes `ops` and the PTX's narrow arithmetic `ptx_math`, or ''."""
    ops = tuple(ops)
    forbidden = {name: kinds for name, kinds in [
        *((op, narrow_types(op) - allowed - _sass_exempt(op, allowed)) for op in ops),
        *((name, ptx_types(name) - allowed - _ptx_exempt(name, allowed)) for name in ptx_math)] if kinds}
    half_acc = [op for op in ops if wide_accumulation and accumulator(op) in ("F16", "BF16")]
    if not forbidden and not half_acc:
        return ""
    parts = []
    if forbidden:
        kinds = sorted(set().union(*forbidden.values()))
        parts.append(f"{', '.join(list(forbidden)[:4])} compute in {'/'.join(kinds)}, which the workload does not allow "
                     f"(it allows {'/'.join(sorted(allowed)) or 'no type narrower than float32'}: its arrays' "
                     "dtypes, [tolerance] allow_tf32 and the splits it names, e.g. splits = [\"3xTF32\"]"
                     f"{_widening_note(allowed)})")
    if half_acc:
        parts.append(f"{', '.join(half_acc[:4])} accumulate in 16 bits where the policy accumulates in float32 "
                     "([tolerance] accumulate): use float32 accumulators")
    return "the precision policy, read from the machine code: " + "; ".join(parts)


def _widening_note(allowed: frozenset[str]) -> str:
    wide = widened(allowed)
    if not wide:
        return ""
    return (f"; {'/'.join(sorted(wide))} only as an input widened exactly: the result of converting one, the "
            "source of a conversion, a tensor-core operand; never rounded to from float32, nor in ALU arithmetic")
