"""What a candidate's PTX says: a writable address of constant memory
(``constant_writes``), a parameter's address put to any use but a TMA descriptor
(``parameter_reach``), and, below, its accumulation: 16-bit adds, subs, fused
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
# put to any use but a TMA descriptor (parameter_reach). 6: read fail-closed (a second attack).
# 7: a third attack (param::entry, a header hidden by a .pragma, a register named as a parameter).
# 8: a fourth (register ranges `name<N>`, .b128), and -lineinfo's debug string sections allowed.
VERSION = 8
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


# The debug-line directives end at the line's end, not at a `;`: with the lines joined, `.loc 1 1 0` took
# the next instruction into a "directive" the parameter audit skipped (found with -lineinfo, session 24).
# Their exact forms are removed while the lines still stand; any other spelling is refused (parameter_reach).
_LINE_DIRECTIVES = re.compile(r"\.loc[ \t]+\d+[ \t]+\d+[ \t]+\d+"
                              r"(?:[ \t]*,[ \t]*function_name[ \t]+[\w$]+(?:[ \t]*\+[ \t]*\d+)?)?"
                              r"(?:[ \t]*,[ \t]*inlined_at[ \t]+\d+[ \t]+\d+[ \t]+\d+)?[ \t]*(?=\n|$)"
                              r"|\.file[ \t]+\d+[ \t]+\"\"(?:[ \t]*,[ \t]*\d+[ \t]*,[ \t]*\d+)?[ \t]*(?=\n|$)")


def _normalised(ptx: str) -> str:
    code = _LEX.sub(lambda t: '""' if t.group(0).startswith('"') else " ", ptx)
    code = _LINE_DIRECTIVES.sub(" ", code)
    # Blanks collapsed first: the dot rule over a long run of them was quadratic (a hostile
    # source's macros doubled a blank to 262 144 of them: 150 s, a second attack, session 24).
    code = re.sub(r"\s+", " ", code)
    return re.sub(r" ?\. ?(?=[A-Za-z_])", ".", code)  # 'add .rn .bf16' is add.rn.bf16 to ptxas


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
# A declaration, not an instruction's state space: `.param` not part of a dotted name (ld.param).
_PARAM_DECLARED = re.compile(r"(?<![\w.$%])\.param\b((?:\s*\.[\w:]+(?:\s+\d+)?)*)\s+([A-Za-z_$][\w$]*)\s*(?:\[\s*(\d+)\s*\])?")
_WIDTH = re.compile(r"\.[bsuf](8|16|32|64)\b")
_REGISTER = re.compile(r"%[A-Za-z_][\w$]*")
_IDENTIFIER = re.compile(r"(?<![\w$%.])[A-Za-z_$][\w$]*")
# What may stand before an instruction: braces, labels (`$L__BB0_2:`, not `::`), a guard (`@p`, `@!%p1`).
_LEADING = re.compile(r"^(?:[{}\s]|[$%]?[\w$]+\s*:(?!:)|@\s*!?\s*[%$]?[\w$]+)*")
_INSTRUCTION = re.compile(r"([a-z][\w.:]*)(?:\s+(.*))?", re.S)
# `[addr` as a parameter's address may stand in: the map of a bulk tensor copy (`[addr, {coordinates}]`) ...
_MAP_WITH_COORDINATES = ("cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor", "cp.async.bulk.prefetch.tensor")
# ... and the lone `[addr]` first operand of a tensor-map prefetch or proxy fence.
_MAP_ALONE = ("prefetch.tensormap", "prefetch.param.tensormap", "prefetch.global.tensormap", "prefetch.const.tensormap",
              "fence.proxy.tensormap")
# What -lineinfo's `.section .debug_str { $L__info_string0: .b8 95,90,0 }` holds: labels and byte data.
_DATA_ONLY = re.compile(r"(?:\s|[$\w]+\s*:(?!:)|\.b(?:8|16|32|64)\b|[-+]?(?:0[xX][0-9a-fA-F]+|\d+)|,|;)*")
# A parameter's name and a constant offset, nothing else: `[k_param_0]`, `[k_param_0+8]`, `[k_param_0+-8]`.
_PARAM_ADDRESS = re.compile(r"\[\s*([A-Za-z_$][\w$]*)\s*(?:\+\s*(-?\s*(?:0[xX][0-9a-fA-F]+|\d+)))?\s*\]")


def parameter_reach(ptx: str) -> tuple[str, ...]:
    """What lets a kernel reach memory of other launches through its parameters.

    A kernel's parameters live in the launch's own slot of a ring the driver keeps in
    device memory, beside the slots of the launches before and after it, the harness's
    checks among them. Session 24 on an H100 (a helper's attack): a kernel that took the
    generic address of its own parameters (``cvta.param``) read the arguments of the three
    launches before it and of one enqueued after it, 64 KiB apart, and rewrote the later
    one's; an ``ld.param`` at a negative offset from its first parameter read the driver's
    words below them, the ring's address among them. The checks' keys are arguments.

    Read fail-closed (a second attack got six forms past a first version): every statement
    of a function's body must read as labels, a guard, then an instruction or a directive,
    or the kernel is refused; functions are found by their braces, and a function declared
    inside one is refused. The parameter state space is allowed only as: ``ld.param`` /
    ``st.param`` at ``[name]`` or ``[name+constant]`` inside that parameter (the header's,
    or a call's own parameters declared in the body; a body declaration may not reuse a
    header's name); the address of a header parameter (``mov`` of its name), copied by
    ``mov`` or made generic by ``cvta.param``, used only as a TMA descriptor: the map of
    ``cp.async.bulk.tensor`` / ``cp.reduce.async.bulk.tensor`` / ``cp.async.bulk.prefetch.tensor``
    (``[addr, {coordinates}]``) or the operand of ``prefetch.tensormap`` /
    ``fence.proxy.tensormap`` (``[addr]``), what CUTLASS-style TMA kernels do with a ``const
    __grid_constant__ CUtensorMap``. Anything else touching a parameter's name, such an address
    or the param state space is refused, and so are the driver-defined ``%envreg`` registers.
    Returns short descriptions (instruction and parameter names, never the source's text)."""
    return _parameter_reach(_normalised(ptx))


def _parameter_reach(code: str) -> tuple[str, ...]:
    found = ["%envreg"] if re.search(r"%envreg", code, re.I) else []
    if re.search(r"\.(?:loc|file)\b", code):  # a debug-line directive in a form the normalisation did not read
        found.append("a .loc or .file the audit cannot read")
    functions, problems = _functions(code)
    found += problems
    for header, body in functions:
        found += _function_reach(header, body)
    return tuple(dict.fromkeys(found))


def _functions(code: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(header, body) of each function, by brace depth. A top-level block is a function's
    body when the text since the last one names `.entry` / `.func` (its header: from that
    token on, whatever stands between the signature and the brace, a `.pragma` among them,
    once hid a whole body), or an initializer (`= {`); any other is a problem, and so is a
    `.entry` / `.func` inside a body (it once cut a kernel's body off its parameters)."""
    out: list[tuple[str, str]] = []
    problems: list[str] = []
    depth, after_last, body_start, header, initializer = 0, 0, 0, "", False
    for m in re.finditer(r"[{}]", code):
        if m.group() == "{":
            if depth == 0:
                before = code[after_last:m.start()]
                tail = before.rsplit(";", 1)[-1]
                initializer = tail.rstrip().endswith("=")  # `.global .b8 s[3] = {`
                section = bool(re.search(r"\.section\b", tail)) and not re.search(r"\.(?:entry|func)\b", tail)
                token = [] if initializer or section else list(re.finditer(r"\.(?:entry|func)\b", before))
                header, body_start = (before[token[-1].start():] if token else ""), m.end()
                if section and not _DATA_ONLY.fullmatch(code[m.end():code.find("}", m.end())]):
                    problems.append("a .section that holds more than labels and data")
                elif not token and not initializer and not section:
                    problems.append("a block that is neither a function nor an initializer")
            depth += 1
            continue
        depth -= 1
        if depth < 0:
            return out, problems + ["an unbalanced brace"]
        if depth == 0:
            body = code[body_start:m.start()]
            if header:
                out.append((header, body))
                if re.search(r"\.(?:entry|func)\b", body):
                    problems.append("a function declared inside a function")
            after_last = m.end()
    return out, problems + (["an unbalanced brace"] if depth else [])


def _param_sizes(text: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for m in _PARAM_DECLARED.finditer(text):
        width = _WIDTH.search(m.group(1) or "")
        size = (int(width.group(1)) // 8 if width else 8) * int(m.group(3) or 1)
        sizes[m.group(2)] = min(size, sizes.get(m.group(2), size))  # declared twice: the smaller counts
    return sizes


def _offset_inside(text: Optional[str], size: int) -> bool:
    try:
        offset = int(text.replace(" ", ""), 0) if text else 0
    except ValueError:  # `08` and the like: not read, so not allowed
        return False
    return 0 <= offset < size


def _in_range(name: str, ranges: dict[str, int]) -> bool:
    """Whether `name` is one of the registers a `prefix<N>` declaration names (prefix0 .. prefixN-1)."""
    digits = len(name) - len(name.rstrip("0123456789"))
    for cut in range(len(name) - digits, len(name)):  # `q1<3>` names q10 .. q12: every split of the digits
        prefix, number = name[:cut], name[cut:]
        if prefix in ranges and int(number) < ranges[prefix] and (number == "0" or not number.startswith("0")):
            return True
    return False


def _access_bytes(mods: list[str]) -> Optional[int]:
    """The bytes one ld / st moves: its type's width times its vector length (`.v4.u32`: 16);
    None for a type not read here (a fourth attack read past the parameters with `.b128`,
    once taken for 8 bytes)."""
    width = next((int(m[1:]) // 8 for m in mods if re.fullmatch(r"[bsuf](?:8|16|32|64|128)", m)), None)
    vector = next((int(m[1:]) for m in mods if re.fullmatch(r"v(?:2|4|8)", m)), 1)
    return None if width is None else width * vector


def _function_reach(header: str, body: str) -> list[str]:
    """Linear in the listing (a hostile one is as long as the source limit allows): names and
    registers by set membership, copies followed once each."""
    params = _param_sizes(header)
    found: list[str] = []
    statements: list[tuple[str, str, list[str]]] = []
    calls: dict[str, int] = {}  # a call's own parameters, declared in the body
    others: set[str] = set()  # every other name the body declares (registers, variables)
    ranges: dict[str, int] = {}  # `.reg .b64 name<N>` declares name0 .. name(N-1)
    for statement in body.split(";"):
        rest = statement[_LEADING.match(statement).end():].strip()  # type: ignore[union-attr]  # matches empty
        if not rest:
            continue
        if rest.startswith("."):  # a directive or declaration
            declared = _param_sizes(rest)
            if declared.keys() & params.keys():
                found.append("a body .param that reuses a parameter's name")
            for name, size in declared.items():
                calls[name] = min(size, calls.get(name, size))
            if not declared:  # `.reg .b64 k_param_0` made `[k_param_0]` a register-indexed read
                others.update(_IDENTIFIER.findall(rest))
                for prefix, count in re.findall(r"([A-Za-z_$][\w$]*)\s*<\s*(\d+)\s*>", rest):  # `k_param_<1>`
                    ranges[prefix] = max(int(count), ranges.get(prefix, 0))
            continue
        m = _INSTRUCTION.fullmatch(rest)
        if not m:
            found.append("a statement the audit cannot read")
            continue
        operands = m.group(2) or ""
        statements.append((m.group(1), operands, [x.strip() for x in operands.split(",")]))
    names = params.keys() | calls.keys()
    if others & names or any(_in_range(name, ranges) for name in names):
        found.append("a name that is both a parameter and something else")
    tainted: set[str] = set()
    copies: dict[str, list[str]] = {}  # register -> registers a mov or cvta.param copies it into
    for opcode, operands, parts in statements:
        mods = opcode.split(".")
        base = mods[0]
        copy = base in ("mov", "cvta") and len(parts) == 2 and bool(_REGISTER.fullmatch(parts[0]))
        if copy and _REGISTER.fullmatch(parts[1]) and (base == "mov" or opcode.startswith("cvta.param")):
            copies.setdefault(parts[1], []).append(parts[0])
        named = set(_IDENTIFIER.findall(operands)) & names
        if "param" in opcode:  # the parameter state space, however spelt (`.param::entry`, `.param::func`)
            if base in ("ld", "st"):
                brackets = re.findall(r"\[[^\]]*\]", operands)
                moved = _access_bytes(mods)
                for b in brackets:
                    a = _PARAM_ADDRESS.fullmatch(b)
                    limit = (params.get(a.group(1)) or calls.get(a.group(1))) if a else None
                    if a is None or limit is None or moved is None or not _offset_inside(a.group(2), limit - moved + 1):
                        found.append(f"{opcode} at an address other than a parameter and a constant inside it")
                if len(brackets) != 1 or set(_IDENTIFIER.findall(re.sub(r"\[[^\]]*\]", "", operands))) & names:
                    found.append(f"{opcode} at an address other than a parameter and a constant inside it")
            elif not (opcode.startswith("cvta.param") and copy) and not opcode.startswith(_MAP_ALONE):
                found.append(f"{opcode} of a parameter's address")
            continue  # cvta.param's source and a prefetch's operand are judged with the copies below
        if not named:
            continue
        if base == "mov" and copy and parts[1] in params:
            tainted.add(parts[0])  # the address of a parameter
        elif base == "call" and not named & params.keys():
            pass  # a call's own parameters, by name
        else:
            found.append(f"{opcode} of a parameter's address")
    queue = list(tainted)
    while queue:  # copies of an address, in whatever order the listing has them
        for into in copies.get(queue.pop(), ()):
            if into not in tainted:
                tainted.add(into)
                queue.append(into)
    for opcode, operands, parts in statements:
        if opcode.startswith("cvta.param") and not (len(parts) == 2 and parts[1] in tainted):
            found.append(f"{opcode} of an address that is no parameter's")
            continue
        if opcode.startswith(_MAP_ALONE) and "param" in opcode.split("."):  # the map in the param space
            target = re.fullmatch(r"\[\s*([%$]?[\w$]+)\s*\]", parts[0])
            if not (target and (target.group(1) in params or target.group(1) in tainted)):
                found.append(f"{opcode} of an address that is no parameter's")
            continue
        used = set(_REGISTER.findall(operands)) & tainted
        if not used:
            continue
        if len(parts) == 2 and parts[0] in tainted and (parts[1] in tainted or parts[1] in params) \
                and (opcode.split(".")[0] == "mov" or opcode.startswith("cvta.param")):
            continue  # the address taken, copied, or made generic
        if opcode.startswith(_MAP_WITH_COORDINATES + _MAP_ALONE):
            end = r",\s*\{" if opcode.startswith(_MAP_WITH_COORDINATES) else r"\]"
            first = r"" if opcode.startswith(_MAP_WITH_COORDINATES) else r"^\s*"
            rest = re.sub(first + r"\[\s*(?:" + "|".join(map(re.escape, used)) + r")\s*(?=" + end + ")", "[", operands)
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
            stop = code.find(";", m.end())
            operands = code[m.end():stop if stop >= 0 else len(code)].split(",")
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
