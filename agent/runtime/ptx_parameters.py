"""Whether a kernel's PTX can reach its launch's parameter block beyond its own
parameters' values (`parameter_reach`; the compile process refuses it: PARAMETER_ADDRESS)."""

from __future__ import annotations

import re
from typing import Optional

from .ptx_text import normalised as _normalised

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
    checks among them. On an H100 a kernel that took the generic address of its own
    parameters (``cvta.param``) read the arguments of the three launches before it and of
    one enqueued after it, 64 KiB apart, and rewrote the later one's; an ``ld.param`` at a
    negative offset from its first parameter read the driver's words below them, the
    ring's address among them. The checks' keys are arguments.

    Read fail-closed, since a list of forbidden forms always misses one: every statement
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
    return parameter_reach_in(_normalised(ptx))


def parameter_reach_in(code: str) -> tuple[str, ...]:
    """parameter_reach of PTX already normalised (agent/runtime/ptx_text.py)."""
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
    None for a type not read here (a `.b128` access taken for 8 bytes would read past the
    parameters)."""
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
