"""What a candidate's PTX says: a writable address of constant memory
(``constant_writes``), a parameter's address put to any use but a TMA descriptor
(agent/runtime/ptx_parameters.py), and, below, its accumulation: 16-bit adds, subs, fused
multiply-adds, atomic and bulk adds, and matrix instructions with 16-bit accumulators.

The precision policy ``accumulate = "float32"`` (the default where a workload has 16-bit
arrays: agent/spec/tolerance.py) is enforced on random inputs only where a reduction is
long enough to drift past the tolerance, and by the accumulation probe only on the path a
kernel takes at the probe's length (2^22): a kernel with a 16-bit running sum on its
short-row path and float32 on its long-row fallback passes both. The PTX shows every path
at once. NVRTC keeps the PTX a CUBIN was built from (a real architecture too); inline
assembly appears in it verbatim, and ptxas lowers no precision.

Refused where the policy holds (agent/evaluate/evaluator.py, compile_candidate):

- ``add`` / ``sub`` / ``fma`` on ``f16``, ``f16x2``, ``bf16``, ``bf16x2`` (``__hadd``,
  ``__hfma``, the 16-bit operators): what a 16-bit running sum is made of. An ``fma``
  whose addend is a constant (an immediate, or a register only ever set from one) is a
  multiply: sm_80 lowers a bf16 ``__hmul`` to ``fma`` with -0;
- ``atom`` / ``red`` / ``multimem`` adds and ``cp.reduce`` bulk adds on those types (a
  16-bit sum in memory);
- ``mma`` / ``wmma.mma`` / ``wgmma`` with an ``f16`` accumulator (the WMMA API's ``__half``
  accumulator fragment, inline assembly).

The PTX is read as ptxas reads it, not as a well-formed listing would look: strings (no
escapes: a string ends at the next quote) and both comment forms in one left-to-right pass
(whichever opens first wins), blanks and
comments between an opcode and its modifiers collapsed, modifiers in any order (ptxas takes
``add.bf16.rn``), every dotted name judged wherever it stands (labels, guards such as
``@ ! p``, several statements on a line inside braces).

Allowed: 16-bit multiplies, conversions, compares, min / max. Also refused, though they
accumulate nothing: the 16-bit exp / log / sin / cos intrinsics (``hexp``, ``h2log``...),
``__hcmadd`` and bf16 ``__hmul_sat``, whose headers use 16-bit ``fma``; compute those in
float. Not caught: a 16-bit running sum kept in float32 adds rounded to 16 bits after each
(``cvt`` round trips, as honest kernels round their outputs), integer emulation, a TMA
reduce-add (``cp.reduce.async.bulk.tensor``) whose 16-bit type is in the tensor map, and
sm_100's ``tcgen05.mma`` (its accumulator type is in a runtime descriptor). The compile
process runs the audit (agent/runtime/compile_child.py: the PTX never leaves it) and sends
back instruction names only, never operands or source text: the compile cache keeps them
beside the CUBIN, and a refusal quotes nothing of the source. None: there was no PTX,
nothing could be audited (a workload with the policy then refuses the kernel).
"""

from __future__ import annotations

import re
from typing import Optional

from .ptx_parameters import parameter_reach_in
from .ptx_text import normalised as _normalised

# In the compile cache's key (agent/runtime/compiler.py): an entry keeps the instruction
# names this audit found, so any change to what the audits here, in ptx_text.py or in
# ptx_parameters.py find or refuse raises VERSION, and entries made under another are not read.
VERSION = 10
_HALF = {"f16", "f16x2", "bf16", "bf16x2"}
# Every dotted name, not preceded by a name character, '$', '%' or '.' (a directive's or
# register's parts, a modifier of another name).
_DOTTED = re.compile(r"(?<![\w$%.])([a-z][a-z0-9_]*)((?:\.[A-Za-z0-9_:]+)+)")
_IMMEDIATE = re.compile(r"^[-+]?(?:0[xX][0-9a-fA-F]+|0[fFdD][0-9a-fA-F]+|\d+)[uU]?$")
_NAME = re.compile(r"[%$]?[A-Za-z_][\w$]*")  # a register: %r1, or a scope's own name (c)


def _accumulates(base: str, mods: list[str]) -> bool:
    m = set(mods)
    half = bool(m & _HALF)
    if base in ("add", "sub", "fma"):
        return half and "f32" not in m  # sm_100's add.f32.bf16 sums in float32
    if base in ("atom", "red"):
        return "add" in m and half
    if base == "multimem":
        return bool(m & {"red", "ld_reduce"}) and "add" in m and half
    if base == "cp":
        return "reduce" in m and "add" in m and half
    if base in ("mma", "wmma"):
        return (base == "mma" or "mma" in m) and "f16" in m and mods.count("f32") < 2
    if base == "wgmma":
        return "f16" in m and "f32" not in m
    return False


# Arithmetic and conversions whose type is narrower than float32: the ALU's 16-bit math
# (HFMA2, HMUL2 and HADD2 in the SASS, where the compiler also uses HFMA2.MMA to move
# constants, so the PTX judges it), TF32 rounding (integer operations in the SASS), the
# integer dot products and float-to-int8 quantisation. agent/spec/precision_policy.py
# decides which the workload allows.
_NARROW_PTX = {"f16", "f16x2", "bf16", "bf16x2", "tf32", "e4m3", "e4m3x2", "e5m2", "e5m2x2"}
_ARITHMETIC = {"add", "sub", "mul", "mad", "fma", "neg", "abs", "min", "max", "ex2", "lg2", "tanh", "rcp", "sqrt",
               "rsqrt", "sin", "cos", "div", "cvt", "mma", "wmma", "wgmma", "testp", "copysign"}
_FLOAT = {"f16", "f16x2", "bf16", "bf16x2", "f32", "f64"}
# Reductions in memory add in their type as much as an add does: `red.global.add.noftz.bf16x2`,
# `atom.add.noftz.f16` (atomicAdd on a half), `cp.reduce.async.bulk....add.bf16`,
# `multimem.red....bf16x2`: a float32 workload could keep a 16-bit running sum in memory.
_REDUCTIONS = {"atom", "red", "multimem", "cp"}


def narrow_math(ptx: str) -> tuple[str, ...]:
    """The distinct narrow arithmetic and conversions in `ptx` (their names, sorted)."""
    return _narrow_math(_normalised(ptx))


def _narrow_math(code: str) -> tuple[str, ...]:
    found: set[str] = set()
    for base, mods in _DOTTED.findall(code):
        m = set(mods.split(".")[1:])
        if base in ("dp4a", "dp2a") or base in _REDUCTIONS and m & _NARROW_PTX or \
                base in _ARITHMETIC and (m & _NARROW_PTX or base == "cvt" and m & {"s8", "u8"} and m & _FLOAT):
            found.add(base + mods)
    return tuple(sorted(found))


def constant_writes(ptx: str) -> tuple[str, ...]:
    """What gives a kernel a generic, so writable, address of its module's constant memory:
    ``cvta.const`` (C++ taking a ``__constant__`` variable's address, or inline assembly
    laundering it) and any ``generic(...)`` operand or initialiser (of a ``.const`` variable
    among others: which names are constant is the declarations' business, and one may be
    declared as the second name of a list, or with a ``%`` name). Through it a kernel can
    store into the constant bank, which outlives the launch: an output kept and replayed (a
    __constant__ array written through such a pointer compiles). The machine code's audit
    refuses the same pointer where ptxas makes it (sass_memory.py: the constant window's
    word of bank 0, a relocation in the data). Reading __constant__ data needs neither
    (``ld.const``)."""
    return _constant_writes(_normalised(ptx))


def _constant_writes(code: str) -> tuple[str, ...]:
    found = [base + mods for base, mods in _DOTTED.findall(code)
             if base == "cvta" and "const" in mods.split(".") and "to" not in mods.split(".")]
    # as an operand or in an initialiser (after `,` `=` `{`): `.entry generic(` is a kernel's name
    found += ["generic()"] if re.search(r"[,={]\s*generic\s*\(", code) else []
    return tuple(dict.fromkeys(found))


def _constant_registers(code: str) -> set[str]:
    """Registers only ever written by a mov of an immediate, by name over every scope (the
    headers' inlined helpers each declare their own `c`): a name also written by anything
    else, or in a vector, is not one; so is none a statement's first operand names in a
    form other than a plain register (an address, a vector, a predicate pair)."""
    constant: dict[str, bool] = {}
    for statement in re.split(r"[;{}]", code):
        m = _DOTTED.search(statement)
        if not m:
            continue
        operands = statement[m.end():].split(",")
        dest = operands[0].strip()
        if not _NAME.fullmatch(dest):
            for name in _NAME.findall(operands[0]):
                constant[name] = False
            continue
        is_constant = m.group(1) == "mov" and len(operands) == 2 and bool(_IMMEDIATE.match(operands[1].strip()))
        constant[dest] = constant.get(dest, True) and is_constant
    return {name for name, yes in constant.items() if yes}


def half_accumulation(ptx: str) -> tuple[str, ...]:
    """The distinct 16-bit accumulating instructions in `ptx` (their names, sorted)."""
    return _half_accumulation(_normalised(ptx))


def _half_accumulation(code: str) -> tuple[str, ...]:
    constants: Optional[set[str]] = None
    found: set[str] = set()
    for m in _DOTTED.finditer(code):
        base, mods = m.group(1), m.group(2).split(".")[1:]
        if not _accumulates(base, mods):
            continue
        if base == "fma":  # a constant addend: a multiply
            stop = code.find(";", m.end())
            operands = code[m.end():stop if stop >= 0 else len(code)].split(",")
            addend = operands[3].strip() if len(operands) == 4 else ""
            if constants is None:
                constants = _constant_registers(code)
            if _IMMEDIATE.match(addend) or addend in constants:
                continue
        found.add(base + m.group(2))
    return tuple(sorted(found))


def audited(ptx: Optional[str]) -> tuple[Optional[tuple[str, ...]], tuple[str, ...], tuple[str, ...],
                                         Optional[tuple[str, ...]]]:
    """(half_accumulation, constant_writes, parameter_reach, narrow_math) of one reading of
    the PTX (agent/runtime/ptx_text.py); (None, (), (), None) where no PTX came back
    (nothing could be audited)."""
    if not ptx:
        return None, (), (), None
    code = _normalised(ptx)
    return _half_accumulation(code), _constant_writes(code), parameter_reach_in(code), _narrow_math(code)
