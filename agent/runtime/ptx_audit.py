"""What a candidate's PTX says about its accumulation: 16-bit adds, subs, fused
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

# In the compile cache's key (agent/runtime/compiler.py): an entry keeps the instruction
# names this audit found, so a change to what it finds must not read entries made before.
# 2: strings end at the next quote (no escapes), as ptxas reads them. 3: the compile process
# refuses a writable address of constant memory (constant_writes). 4: a string spans lines;
# any generic() is such an address. 5: the compile process refuses a parameter's address
# put to any use but a TMA descriptor (parameter_reach).
VERSION = 5
_HALF = {"f16", "f16x2", "bf16", "bf16x2"}
# Strings and comments in one left-to-right pass: a '/*' inside a '//' comment opens nothing.
# A string ends at the next quote: ptxas reads a backslash in one as itself, so `"a\"` is a
# whole string to it (reading `\"` as an escaped quote hid `.pragma "x\"; add.bf16 ...;
# .pragma "x";`'s add inside one long string: an attack on this audit, session 23).
# Nor does a newline end one: ptxas reads a string across lines (a second attack hid an add
# between `.pragma "a` and `b"` on the next line).
_LEX = re.compile(r'"[^"]*"|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S)
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


def _normalised(ptx: str) -> str:
    code = _LEX.sub(lambda t: '""' if t.group(0).startswith('"') else " ", ptx)
    return re.sub(r"\s*\.\s*(?=[A-Za-z_])", ".", code)  # 'add .rn .bf16' is add.rn.bf16 to ptxas


def constant_writes(ptx: str) -> tuple[str, ...]:
    """What gives a kernel a generic, so writable, address of its module's constant memory:
    ``cvta.const`` (C++ taking a ``__constant__`` variable's address, or inline assembly
    laundering it) and any ``generic(...)`` operand or initialiser (of a ``.const`` variable
    among others: which names are constant is the declarations' business, and a second
    attack declared one as the second name of a list, another with a ``%`` name). Through
    it a kernel can store into the constant bank, which outlives the launch: an output
    kept and replayed (an attack on the state audit, session 23: the CUBIN audit reads
    .nv.global only, and a __constant__ array written through such a pointer compiled and
    passed). Reading __constant__ data needs neither (``ld.const``); a generic() of a
    mutable global is refused already (cubin_audit.py)."""
    return _constant_writes(_normalised(ptx))


def _constant_writes(code: str) -> tuple[str, ...]:
    found = [base + mods for base, mods in _DOTTED.findall(code)
             if base == "cvta" and "const" in mods.split(".") and "to" not in mods.split(".")]
    # as an operand or in an initialiser (after `,` `=` `{`): `.entry generic(` is a kernel's name
    found += ["generic()"] if re.search(r"[,={]\s*generic\s*\(", code) else []
    return tuple(dict.fromkeys(found))


# A declaration, not an instruction's state space: `.param` not part of a dotted name (ld.param).
_PARAM_DECLARED = re.compile(r"(?<![\w.$%])\.param\b((?:\s*\.[\w:]+(?:\s+\d+)?)*)\s+([A-Za-z_$][\w$]*)\s*(?:\[\s*(\d+)\s*\])?")
_WIDTH = re.compile(r"\.[bsuf](8|16|32|64)\b")
_REGISTER = re.compile(r"%[A-Za-z_][\w$]*")
_IDENTIFIER = re.compile(r"(?<![\w$%.])[A-Za-z_$][\w$]*")
_LEADING = re.compile(r"^(?:[{}\s]|[$%]?[\w$]+\s*:(?!:)|@\s*!?\s*%[\w$]+)*")  # braces, labels, guards
_TENSOR_MAP_USE = ("cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor", "prefetch.tensormap",
                   "prefetch.param.tensormap", "prefetch.global.tensormap")


def parameter_reach(ptx: str) -> tuple[str, ...]:
    """What lets a kernel reach memory of other launches through its parameters.

    A kernel's parameters live in the launch's own slot of a ring the driver keeps in
    device memory, beside the slots of the launches before and after it, the harness's
    checks among them. Session 24 on an H100 (a helper's attack): a kernel that took the
    generic address of its own parameters (``cvta.param``) read the arguments of the three
    launches before it and of one enqueued after it, 64 KiB apart, and rewrote the later
    one's; an ``ld.param`` at a negative offset from its first parameter read the driver's
    words below them, the ring's address among them. The checks' keys are arguments.

    So a parameter's address may only ever name a TMA descriptor: the address of a
    ``.param`` (``mov`` of its name, or ``cvta.param``), copied by ``mov`` or made generic
    by ``cvta.param``, may appear only as the tensor map of ``cp.async.bulk.tensor`` /
    ``cp.reduce.async.bulk.tensor`` (``[addr, {coordinates}]``) or of ``prefetch.tensormap``
    (``[addr]``), what CUTLASS-style TMA kernels do with a ``const __grid_constant__
    CUtensorMap``. Refused: any other use of such an address (arithmetic on it, a load
    through it, an ``ld.param`` with a register address), an ``ld.param`` / ``st.param`` of a
    parameter's name at an offset outside it, a parameter's name anywhere else but a
    ``call``, and the driver-defined ``%envreg`` registers. Returns short descriptions
    (instruction names and parameter names, never operands of the source)."""
    return _parameter_reach(_normalised(ptx))


def _param_sizes(code: str) -> dict[str, int]:
    sizes = {}
    for m in _PARAM_DECLARED.finditer(code):
        width = _WIDTH.search(m.group(1) or "")
        sizes[m.group(2)] = (int(width.group(1)) // 8 if width else 8) * int(m.group(3) or 1)
    return sizes


def _statements(code: str) -> list[tuple[str, str]]:
    """(opcode with its modifiers, operands) of every instruction; declarations and
    directives (a leading '.') have no opcode and are left out."""
    out = []
    for statement in code.split(";"):
        if re.match(r"\s*(?:\(|[A-Za-z_$][\w$]*\s*\()", statement):  # a function's header: its body after `{`
            statement = statement.split("{", 1)[1] if "{" in statement else ""
        rest = statement[_LEADING.match(statement).end():]  # type: ignore[union-attr]  # the pattern matches empty
        m = re.match(r"([a-z][\w.:]*)\s*(.*)", rest, re.S)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def _offset_inside(text: str, size: int) -> bool:
    try:
        offset = int(text.replace(" ", "").lstrip("+") or "0", 0) if text.strip() else 0
    except ValueError:
        return False
    return 0 <= offset < size


def _parameter_reach(code: str) -> tuple[str, ...]:
    """Each function on its own: registers and parameter names are its own."""
    found = ["%envreg"] if re.search(r"%envreg", code) else []
    for function in re.split(r"\.(?:entry|func)\b", code):  # (normalised: `.visible.entry`)
        found += _function_reach(function)
    return tuple(dict.fromkeys(found))


def _function_reach(code: str) -> list[str]:
    """Linear in the listing (a hostile one is as long as the source limit allows): names
    and registers by set membership, copies followed once each."""
    sizes = _param_sizes(code)
    statements = [(opcode, operands, [x.strip() for x in operands.split(",")]) for opcode, operands in _statements(code)]
    found: list[str] = []
    tainted: set[str] = set()
    copies: dict[str, list[str]] = {}  # register -> registers a mov or cvta.param copies it into
    for opcode, operands, parts in statements:
        base = opcode.split(".")[0]
        copy = base in ("mov", "cvta") and len(parts) == 2 and bool(_REGISTER.fullmatch(parts[0]))
        if copy and _REGISTER.fullmatch(parts[1]):
            copies.setdefault(parts[1], []).append(parts[0])
        if not set(_IDENTIFIER.findall(operands)) & sizes.keys():
            continue  # names no parameter
        if copy and parts[1] in sizes:
            tainted.add(parts[0])  # the address of a parameter
        elif base == "call":
            pass  # a call's arguments and result, by name
        elif base in ("ld", "st") and "param" in opcode.split(".")[1:]:
            for m in re.finditer(r"\[\s*([A-Za-z_$][\w$]*)\s*((?:\+\s*[-+]?\s*\w+)?)\s*\]", operands):
                if m.group(1) in sizes and not _offset_inside(m.group(2), sizes[m.group(1)]):
                    found.append(f"{opcode} outside {m.group(1)}")
        else:
            found.append(f"{opcode} of a parameter's address")
    queue = list(tainted)
    while queue:  # copies of an address, in whatever order the listing has them
        for into in copies.get(queue.pop(), ()):
            if into not in tainted:
                tainted.add(into)
                queue.append(into)
    for opcode, operands, parts in statements:
        used = set(_REGISTER.findall(operands)) & tainted
        if not used:
            continue
        source = len(parts) == 2 and (parts[1] in tainted or parts[1] in sizes)
        if source and parts[0] in tainted and (opcode.split(".")[0] == "mov" or opcode.startswith("cvta.param")):
            continue  # the address taken, copied, or made generic
        if opcode.startswith(_TENSOR_MAP_USE):  # the map: `[addr, {coordinates}]`, prefetch's `[addr]`
            end = r"\]" if opcode.startswith("prefetch") else r",\s*\{"
            rest = re.sub(r"\[\s*(?:" + "|".join(re.escape(r) for r in used) + r")\s*(?=" + end + ")", "[", operands)
            if not set(_REGISTER.findall(rest)) & tainted:
                continue
        found.append(f"{opcode} of a parameter's address")
    return found


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
            operands = code[m.end():].split(";", 1)[0].split(",")
            addend = operands[3].strip() if len(operands) == 4 else ""
            if constants is None:
                constants = _constant_registers(code)
            if _IMMEDIATE.match(addend) or addend in constants:
                continue
        found.add(base + m.group(2))
    return tuple(sorted(found))


def audited(ptx: Optional[str]) -> tuple[Optional[tuple[str, ...]], tuple[str, ...], tuple[str, ...]]:
    """(half_accumulation, constant_writes, parameter_reach) of one reading of the PTX;
    (None, (), ()) where no PTX came back (nothing could be audited)."""
    if not ptx:
        return None, (), ()
    code = _normalised(ptx)
    return _half_accumulation(code), _constant_writes(code), _parameter_reach(code)
