"""Where values go in a function's machine code: a forward analysis over its control flow
(agent/runtime/sass_listing.py) of what each register may hold, for the audits that
follow an address from where it is made to every instruction that uses it
(agent/runtime/sass_memory.py).

A state maps a register (``R4``, ``UR12``, ``P0``) to the facts it may hold; a join is
their union, so a register holds a fact after a branch if it does on either path. A
guarded instruction may not run: its destinations keep what they held and gain what it
writes. Reading operands is fail-safe for the audits: taking too many registers as read
or too few as overwritten only finds more."""

from __future__ import annotations

import re
from typing import Callable, Optional

from .sass_listing import REGISTER, Function, Instruction

Fact = tuple[str, str, int]  # (kind, name, offset): what a register may hold
State = dict[str, frozenset[Fact]]
Step = Callable[[Instruction, State], tuple[State, list[str]]]
WIDEST = 8  # distinct offsets a register keeps before they are taken as unknown (-1)

# Opcodes whose first operand, a register, is read, not written.
_READS_FIRST = {"BRX", "JMX", "CALL", "RET", "WARPSYNC", "NANOSLEEP", "BSYNC", "BSSY", "JMP", "BRA", "EXIT", "KILL",
                "BPT", "YIELD", "UTMACCTL", "UTMAPF", "UBLKPF", "CCTL", "CCTLL", "ERRBAR", "MEMBAR", "DEPBAR",
                "ST", "STG", "STS", "STL", "STSM", "RED", "REDG", "REDAS", "SYNCS", "UTMALDG", "UTMASTG",
                "UTMAREDG", "UBLKCP", "UBLKRED", "SUST", "SURED", "BAR", "ARRIVES", "FENCE", "ACQBULK"}


_DESTINATION = re.compile(r"U?R\d+|U?P\d+|RZ|URZ|PT|UPT")
_PREDICATE = re.compile(r"U?P(?:\d+|T)")
_U_NAMED = {"UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UTMACCTL", "UBLKCP", "UBLKRED", "UBLKPF", "UMOV"}
_TWO_PREDICATES = {"ISETP", "FSETP", "DSETP", "HSETP2", "PLOP3", "PSETP"}
_PREDICATE_THEN_REGISTER = {"ATOM", "ATOMG", "ATOMS", "SHFL", "LOP3", "ELECT", "VOTE"}
_CARRY_OUT = {"IADD3", "LEA", "IADD", "IMAD"}


_DOUBLE = {"DADD", "DMUL", "DFMA", "DMNMX", "DSET", "DMMA"}  # float64 math: register pairs in and out
_CONVERSIONS = {"I2F", "F2I", "F2F", "I2I", "I2FP", "F2IP", "FRND"}  # .DEST_TYPE.SOURCE_TYPE
_TYPE = re.compile(r"[USF](?:8|16|32|64)")


def width(ins: Instruction) -> int:
    """Registers an instruction's destination spans: 2 for 64-bit results (a `.64` or `.WIDE`
    form, float64 math, a conversion to a 64-bit type), 4 for 128-bit."""
    mods = ins.opcode.split(".")[1:]
    if "128" in mods:
        return 4
    base = ins.base.removeprefix("U")
    types = [m for m in mods if _TYPE.fullmatch(m)]
    if set(mods) & {"64", "WIDE"} or base in _DOUBLE or (base in _CONVERSIONS and types and types[0].endswith("64")):
        return 2
    return 1


def reads_pairs(ins: Instruction) -> bool:
    """Whether the instruction's register operands may be 64-bit (each read with the next
    register): a `.64` form, float64 math and compares, or any 64-bit type among its
    modifiers (`I2F.F64.U64` reads R2:R3 though no operand says `.64`). Reading a 32-bit
    operand as a pair only finds more."""
    mods = ins.opcode.split(".")[1:]
    return "64" in mods or ins.base.removeprefix("U") in _DOUBLE | {"DSETP"} or \
        any(_TYPE.fullmatch(m) and m.endswith("64") for m in mods)


def destinations(ins: Instruction) -> tuple[int, list[str]]:
    """(operands that are destinations, the registers they write). Most instructions write
    their first operand (its pair or quad for a wide result); an add or LEA also the carry
    predicates after it; a compare its first two predicates; an atomic, a shuffle, ELECT or a
    LOP3 whose first operand is a predicate, that predicate and the register after it."""
    ops = ins.operands
    if not ops or ins.base in _READS_FIRST or not _DESTINATION.fullmatch(ops[0]):
        return 0, []
    base = ins.base.removeprefix("U") if ins.base not in _U_NAMED else ins.base
    if base in _TWO_PREDICATES:
        count = 2
    elif base in _PREDICATE_THEN_REGISTER and _PREDICATE.fullmatch(ops[0]) and len(ops) > 1 \
            and _DESTINATION.fullmatch(ops[1]):
        count = 2
    else:
        count = 1
        while base in _CARRY_OUT and count < len(ops) - 1 and _PREDICATE.fullmatch(ops[count]):
            count += 1
    count = min(count, len(ops))
    regs: list[str] = []
    for k, operand in enumerate(ops[:count]):
        wide = width(ins) if k == 0 or not _PREDICATE.fullmatch(operand) else 1
        regs += _span(operand, wide if operand.lstrip("U").startswith("R") else 1)
    return count, regs


def _span(register: str, n: int) -> list[str]:
    m = re.fullmatch(r"(U?[RP])(\d+)", register)
    if m is None:  # RZ, URZ, PT, UPT: writes nothing
        return []
    return [f"{m.group(1)}{int(m.group(2)) + k}" for k in range(n)]


def registers_in(operand: str, pair: bool = False) -> list[str]:
    """The registers an operand reads: `R2.64` and, where `pair`, any register is also read
    with the next one (a 64-bit operand)."""
    out: list[str] = []
    for m in REGISTER.finditer(operand):
        wide = pair or operand[m.end():m.end() + 3] == ".64"
        out += _span(m.group(1), 2 if wide and m.group(1).lstrip("U").startswith("R") else 1)
    return out


def forward(function: Function, step: Step) -> list[str]:
    """Run `step` over every instruction, each with the state that may hold before it, until
    no state grows; the findings in the order of their instructions. Instructions no path
    from the first reaches (the target of a computed jump or return: `RET.REL.NODEC R20`
    lands where no branch names) start from an empty state: what they make is followed
    there, and what a computed jump would carry to them is refused at the jump."""
    instructions = function.instructions
    if not instructions:
        return []
    before: list[Optional[State]] = [None] * len(instructions)
    before[0] = {}
    work: list[int] = [0]
    findings: dict[str, int] = {}  # finding -> the first instruction it was found at
    while True:
        if not work:
            unvisited = next((i for i, s in enumerate(before) if s is None), None)
            if unvisited is None:
                break
            before[unvisited] = {}
            work.append(unvisited)
        i = work.pop()
        state = before[i]
        assert state is not None
        after, found = step(instructions[i], state)
        for f in found:
            findings[f] = min(i, findings.get(f, i))
        for s in function.successors[i]:
            merged = _join(before[s], after)
            if merged is not None:
                before[s] = merged
                work.append(s)
    return sorted(findings, key=lambda f: findings[f])


def _join(old: Optional[State], new: State) -> Optional[State]:
    """`old` grown by `new`; None where nothing grew."""
    if old is None:
        return dict(new)
    grown = False
    out = dict(old)
    for reg, facts in new.items():
        have = out.get(reg, frozenset())
        joined = widened(have | facts)
        if joined != have:
            out[reg] = joined
            grown = True
    return out if grown else None


def widened(facts: frozenset[Fact]) -> frozenset[Fact]:
    """Facts with too many offsets taken as their kinds at an unknown offset (-1), and an
    unknown offset standing for every known one of its kind and name: states only grow, so
    the analysis ends."""
    if len(facts) > WIDEST:
        return frozenset((kind, name, -1) for kind, name, _ in facts)
    unknown = {(kind, name) for kind, name, offset in facts if offset == -1}
    return frozenset(f for f in facts if f[2] == -1 or (f[0], f[1]) not in unknown)
