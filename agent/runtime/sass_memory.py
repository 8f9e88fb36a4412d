"""What a kernel's machine code may read and write beyond its own arrays, read from the
CUBIN's SASS and ELF tables; the findings name instructions and symbols, never source text.

Both rules judge candidates (agent/evaluate/compile_audit.py), every function of the CUBIN.

Parameters (PARAMETER_ADDRESS): a kernel reads its launch's
constant bank 0 only at its own parameters' offsets (the CUBIN's ``.nv.info``: each
parameter's offset and size) and at the driver words a kernel needs (the launch's shape,
shared-memory sizes, stack and local window, the memory descriptor:
agent/runtime/bank0_layout.py), always at a constant offset. The parameter space's
generic address (``c[0x0][0x198]`` on sm_90: ``cvta.param``, ``&param``) may only become
a TMA descriptor: followed through copies and constant adds to a ``UTMA*`` instruction's
descriptor operand, at the offset of a parameter of at least 128 bytes. A load through it
would read the launch-parameter ring, other launches' arguments (the checks' keys) among
them.

State (KERNEL_KEEPS_STATE): the address of module data comes from
the module's address table (constant bank 4, each entry relocated to a symbol). Followed
through copies and adds, it may only be read from: a ``__device__`` table the code only
reads is a table of constants. A store, atomic or reduction through it, or the address
stored, compared, shifted, passed to a call or read at a register index of the table, is
refused: through it a launch keeps what a later one reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .bank0_layout import Bank0, layout
from .cubin_elf import STT_FUNC, Cubin, Parameters, Symbol
from .sass_flow import Fact, State, destinations, forward, reads_pairs, registers_in, widened
from .sass_listing import Function, Instruction, parse_listing

_CONSTANT = re.compile(r"(?<![\w.])c\[([^\]]*)\]\[([^\]]*)\]")
_IMMEDIATE = re.compile(r"-?0x[0-9a-f]+|-?\d+")
_ZERO = {"RZ", "URZ", "PT", "UPT", "!PT", "!UPT"}
_LOADS = {"LDG", "LD", "LDGSTS", "ULDG"}
_WRITES = {"ST", "STG", "RED", "REDG", "ATOM", "ATOMG", "SUST", "SURED", "UBLKRED", "UTMAREDG"}
# Control goes where the listing does not follow it (another function, a computed target):
# what happens there with a live address is not followed, so none may be live.
_CALLS = {"CALL", "RET", "BRX", "JMX"}
_CONSTANT_LOADS = {"LDC", "ULDC", "LDCU", "MOV", "UMOV"}
_TMA_MAP = re.compile(r"\[(UR\d+)\]")
TMA_MAP_BYTES = 128  # a CUtensorMap
PARAMETERS, STATE = "P", "S"  # which rule a finding is of: its first character, cut off by audit_memory


@dataclass(frozen=True)
class MemoryFindings:
    parameters: tuple[str, ...]  # bank-0 reads and uses of the parameters' address that are refused
    state: tuple[str, ...]  # uses of module data's addresses that are refused


def audit_memory(cubin: bytes, listing: str) -> MemoryFindings:
    """The findings of one CUBIN and nvdisasm's ``-c`` listing of it (empty: it passes)."""
    try:
        image = Cubin(cubin)
        functions = parse_listing(listing)
        params = image.parameters()
        relocations = image.relocations()
    except ValueError as e:
        return MemoryFindings((f"the machine code could not be read: {e}",), ())
    target = re.search(r"^\s*\.target\s+(\S+)", listing, re.M)
    arch = _name(target.group(1)) if target else "this target"
    bank0 = layout(arch)
    if bank0 is None:
        return MemoryFindings((f"the driver's words of the launch's constant bank are not known on {arch} "
                               "(agent/runtime/bank0_layout.py measures them per architecture)",), ())
    table = {r.offset: r.symbol for r in relocations.get(".nv.constant4", [])}
    state: list[str] = []
    for section, found in relocations.items():
        if section in (".nv.constant4", ".debug_frame"):
            continue
        state += [f"{section} holds the address of {_what(image, r.symbol)} `{_name(r.symbol.name)}`"
                  for r in found if not _is_function(image, r.symbol)]
    parameters: list[str] = []
    for function in functions:
        audit = _Audit(image, function, bank0, params.get(function.section), table)
        for finding in forward(function, audit.step):
            (parameters if finding.startswith(PARAMETERS) else state).append(finding[1:])
    return MemoryFindings(tuple(dict.fromkeys(parameters)), tuple(dict.fromkeys(state)))


def _name(text: str) -> str:
    return re.sub(r"[^\w$.@]", "?", text)[:60]


def _is_function(image: Cubin, symbol: Symbol) -> bool:
    section = image.sections[symbol.section].name if 0 < symbol.section < len(image.sections) else ""
    return symbol.type == STT_FUNC or section.startswith(".text.")


def _what(image: Cubin, symbol: Symbol) -> str:
    section = image.sections[symbol.section].name if 0 < symbol.section < len(image.sections) else ""
    if section.startswith(".nv.global"):
        return "the __device__ global"
    return "the __constant__ variable" if section.startswith(".nv.constant") else "the module's data"


def _offset(text: str) -> Optional[int]:
    """A constant bank's offset operand as a number: `0x210`, `RZ` (0); None where a register indexes it."""
    parts = [p.strip() for p in text.split("+")]
    if any(p not in _ZERO and not _IMMEDIATE.fullmatch(p) for p in parts):
        return None
    return sum(int(p, 0) for p in parts if p not in _ZERO)


def _bytes(ins: Instruction, operand_index: int) -> int:
    """The bytes an instruction reads from a constant-bank operand."""
    mods = set(ins.opcode.split(".")[1:])
    if "128" in mods:
        return 16
    if mods & {"U8", "S8"}:
        return 1
    if mods & {"U16", "S16"}:
        return 2
    wide_addend = "WIDE" in mods and operand_index == len(ins.operands) - 1
    if reads_pairs(ins) or wide_addend:
        return 8
    return 4


class _Audit:
    """One function's rules: the step forward() runs over each instruction."""

    def __init__(self, image: Cubin, function: Function, bank0: Bank0, params: Optional[Parameters],
                 table: dict[int, Symbol]):
        self.image, self.function, self.bank0, self.table = image, function, bank0, table
        self.params = params if function.entry and params is not None else Parameters(0, ())
        self.where = _name(function.section.removeprefix(".text."))
        self.data_in_table = any(not _is_function(image, s) for s in table.values())

    # -- what the constant banks give ----------------------------------------------------------
    def _constant(self, ins: Instruction, index: int, bank: str, at: str, found: list[str]) -> dict[int, Fact]:
        """Check one `c[bank][at]` operand; the facts of the 32-bit words it reads, by word."""
        offset = _offset(at)
        size = _bytes(ins, index)
        quoted = f"{ins.opcode} c[{bank}][{at}] in {self.where}"
        if bank == "0x0":
            pa = self.bank0.parameter_address
            if offset is None:
                found.append(PARAMETERS + f"{quoted} reads the launch's constant bank at a register index")
            elif pa <= offset < pa + 8 and offset + size <= pa + 8 and offset % 4 == 0 and size >= 4:
                return {k: ("param" if offset + 4 * k == pa else "param-hi", "", 0) for k in range(size // 4)}
            elif offset < pa + 8 and pa < offset + size:
                # Bytes of the address, or words of it with the bank's next ones: pieces a kernel
                # could put back together, known only as some of the address.
                found.append(PARAMETERS + f"{quoted} reads part of the parameters' address "
                             f"(c[0x0][{pa:#x}]) other than as its two words")
            elif self.bank0.constant_window <= offset < self.bank0.constant_window + 8:
                found.append(STATE + f"{quoted} reads the generic address of __constant__ memory, through which it can "
                             "be written")
            elif not self.params.covers(offset, size) and self.bank0.name(offset, size) is None:
                found.append(PARAMETERS + f"{quoted} reads a word of the launch's constant bank that is no parameter of the "
                             "kernel's and no launch size")
            return {}
        if bank in ("0x2", "0x3"):  # ptxas's literals (before sm_90), the module's __constant__ data: read-only
            return {}
        if bank == "0x4":
            if offset is None:
                if self.data_in_table:
                    found.append(STATE + f"{quoted} reads the module's address table at a register index")
                return {}
            facts: dict[int, Fact] = {}
            # Every destination word gets what any byte it reads holds: a read of a byte or a
            # half of an entry is part of the address as much as a word is.
            for k in range(max(1, size // 4)):
                first, last = offset + 4 * k, offset + 4 * k + min(size, 4) - 1
                for start, symbol in self.table.items():
                    if start <= last and first < start + 8 and not _is_function(self.image, symbol):
                        facts[k] = ("sym-hi" if first >= start + 4 else "sym", symbol.name, 0)
            return facts
        found.append(PARAMETERS + f"{quoted} reads a constant bank the audit does not know")
        return {}

    # -- one instruction -----------------------------------------------------------------------
    def step(self, ins: Instruction, state: State) -> tuple[State, list[str]]:
        if not state and not any("c[" in o for o in ins.operands):
            return state, []  # nothing to follow and no constant bank read: most instructions
        found: list[str] = []
        ndest, dests = destinations(ins)
        mods = ins.opcode.split(".")[1:]
        # a 64-bit addend (IMAD.WIDE; IMAD.HI adds a register pair too); 64-bit sources
        pair_last = "WIDE" in mods or (ins.base.lstrip("U") == "IMAD" and "HI" in mods)
        pairs = reads_pairs(ins)
        reads: list[tuple[int, frozenset[Fact]]] = []  # (operand index, facts it may hold)
        loaded: dict[int, Fact] = {}  # a constant bank's words this instruction moves, by word
        for i, operand in enumerate(ins.operands):
            facts: set[Fact] = set()
            for bank, at in _CONSTANT.findall(operand):
                words = self._constant(ins, i, bank, at, found)
                if ins.base in _CONSTANT_LOADS:
                    loaded.update(words)  # its destinations get them word by word
                else:
                    facts.update(words.values())
            if i < ndest:
                continue
            for reg in registers_in(operand, pairs or (pair_last and i == len(ins.operands) - 1)):
                facts.update(state.get(reg, frozenset()))
            if operand.lstrip("!") in ("PR", "UPR"):  # every predicate at once (P2R)
                facts.update(f for reg, held in state.items() if reg.lstrip("U").startswith("P") for f in held)
            if facts:
                reads.append((i, frozenset(facts)))
        guard = ins.guard.lstrip("@!")
        if state.get(guard):
            found.append(self._misuse(ins, state[guard]))
        tma = _TMA_MAP.fullmatch(ins.operands[-1]) if ins.base.startswith("UTMA") and ins.operands else None
        if tma and any(f[0] == "param" for f in state.get(tma.group(1), ())):
            high = state.get(f"UR{int(tma.group(1)[2:]) + 1}", frozenset())
            if not high or any(f[0] != "param-hi" or f[2] != 0 for f in high):
                found.append(PARAMETERS + f"{ins.opcode} in {self.where} takes a TMA descriptor whose high word is not "
                             "the parameters' address's")
        written = self._judge(ins, ndest, reads, found)
        after = dict(state)
        for k, reg in enumerate(dests):
            new = frozenset({loaded[k]} if k in loaded else written)
            predicate = reg.lstrip("U").startswith("P")
            if predicate:  # a carry (or a compare) out of any part of an address holds a bit of it
                new = frozenset(f if f[0] == "carry" else ("carry", f"{f[0]}|{f[1]}", 0) for f in written)
            # A guarded write keeps what the register held, except ELECT's predicate: ptxas
            # reuses a spent carry's predicate for the elect-one loop (`@P0 ELECT P1` with P0
            # set true just before), where the old value never flows on. Any other guarded
            # write to a predicate may not run and leave a carry in place.
            old = after.get(reg, frozenset()) if ins.guard and not (predicate and ins.base == "ELECT") else frozenset()
            merged = widened(old | new)
            if merged:
                after[reg] = merged
            else:
                after.pop(reg, None)
        if ins.base in _CALLS and any(f[0] in ("param", "sym") for r, facts in state.items()
                                      if not r.lstrip("U").startswith("P") for f in facts):
            live = next(f for r, facts in state.items() if not r.lstrip("U").startswith("P") for f in facts
                        if f[0] in ("param", "sym"))
            found.append(self._misuse(ins, frozenset({live}), call=True))
        return after, found

    def _judge(self, ins: Instruction, ndest: int, reads: list[tuple[int, frozenset[Fact]]],
               found: list[str]) -> frozenset[Fact]:
        """The facts the destinations get, with a finding for each use that is not allowed."""
        if not reads:
            return frozenset()
        linear = self._linear(ins, ndest)
        out: set[Fact] = set()
        for index, facts in reads:
            operand = ins.operands[index]
            if index in linear:
                out |= {self._moved(ins, ndest, index, f) for f in facts}
                continue
            kinds = {f[0] for f in facts}
            if kinds <= {"sym", "sym-hi"} and ins.base in _LOADS and index >= 1 and "[" in operand:
                continue  # a read of module data: the loaded value is the data, not its address
            if kinds <= {"param", "param-hi"} and ins.base.startswith("UTMA") and index == len(ins.operands) - 1 \
                    and _TMA_MAP.fullmatch(operand):
                bad = [f for f in facts if f[0] == "param" and not (
                    f[2] >= 0 and self.params.covers(self.params.base + f[2], TMA_MAP_BYTES))]
                if bad:
                    found.append(PARAMETERS + f"{ins.opcode} in {self.where} takes a TMA descriptor at no parameter's offset")
                continue
            found.append(self._misuse(ins, facts, operand=index))
        return frozenset(out)

    def _linear(self, ins: Instruction, ndest: int) -> set[int]:
        """The operands whose value enters the result by a copy or an add (not negated)."""
        ops, base = ins.operands, ins.base.lstrip("U")
        sources = list(range(ndest, len(ops)))
        if base in ("MOV", "R2UR", "SEL", "IADD3", "VIADD", "IADD"):
            chosen = sources[:-1] if base == "SEL" else sources
        elif base == "IMAD" and len(sources) >= 3:
            a, b, c = sources[:3]
            chosen = [c] + ([a] if ops[b] == "0x1" else []) + ([b] if ops[a] == "0x1" else [])
            chosen += sources[3:] if ".X" in ins.opcode else []
        elif base == "LEA" and len(sources) >= 2:
            chosen = [sources[1]] + (sources[-1:] if ".X" in ins.opcode else [])
        else:
            chosen = []
        return {i for i in chosen if not ops[i].startswith(("-", "~", "|"))}

    def _moved(self, ins: Instruction, ndest: int, index: int, fact: Fact) -> Fact:
        """A fact as an add or a copy passes it on: a carry becomes the high half; a known offset
        of the parameters' address grows by the constants added, and is unknown after a register."""
        kind, name, offset = fact
        if kind == "carry":
            k, n = name.split("|", 1)
            return (k if k.endswith("-hi") else k + "-hi", n, 0)
        if kind not in ("param", "param-hi") or offset < 0:
            return fact
        if kind == "param" and ".X" in ins.opcode:  # a carry-in adds 0 or 1 that no operand shows
            return (kind, name, -1)
        others = [o for i, o in enumerate(ins.operands[ndest:], ndest) if i != index and not o.startswith(("P", "!P",
                                                                                                           "UP", "!UP"))]
        if ins.base.lstrip("U") in ("MOV", "R2UR") or self._imad_copy(ins, ndest, index):
            return fact
        if ins.base.lstrip("U") in ("IADD3", "VIADD", "IADD") and all(o in _ZERO or _IMMEDIATE.fullmatch(o)
                                                                      for o in others):
            return (kind, name, offset + sum(int(o, 0) for o in others if o not in _ZERO))
        return (kind, name, -1)

    @staticmethod
    def _imad_copy(ins: Instruction, ndest: int, index: int) -> bool:
        """Whether an IMAD copies operand `index` unchanged: `IMAD.U32 R10, RZ, RZ, UR6` (a zero
        product plus it), or it times 0x1 plus zero. ptxas moves a uniform register to a vector
        one this way: NVRTC 13.0 moves wgmma_swap's TMA descriptor address into R10 so."""
        # Plain forms only: .HI adds a register pair and returns its high word, .X a carry, .WIDE a pair.
        if ins.base.lstrip("U") != "IMAD" or not set(ins.opcode.split(".")[1:]) <= {"U32", "MOV"}:
            return False
        ops = ins.operands
        if len(ops) != ndest + 3:
            return False
        a, b, c = ndest, ndest + 1, ndest + 2
        if index == c:
            return ops[a] in _ZERO or ops[b] in _ZERO
        other = b if index == a else a
        return ops[other] == "0x1" and ops[c] in _ZERO

    def _misuse(self, ins: Instruction, facts: frozenset[Fact], operand: int = -1, call: bool = False) -> str:
        """The finding for an instruction using an address where it may not (`call`: handing it
        to another function, whose code the caller's rules do not follow)."""
        fact = sorted(facts)[0]
        kind, name = fact[1].split("|", 1) if fact[0] == "carry" else (fact[0], fact[1])
        head = f"{ins.opcode} in {self.where}"
        if kind.startswith("param"):
            address = f"the parameters' address (c[0x0][{self.bank0.parameter_address:#x}])"
            return PARAMETERS + (f"{head} passes {address} to another function or a computed jump's target" if call else
                                 f"{head} uses {address} other than as a TMA descriptor")
        symbol = next((s for s in self.table.values() if s.name == name), None)
        what = f"{_what(self.image, symbol) if symbol else 'the module data'} `{_name(name)}`"
        if call:
            return STATE + f"{head} passes the address of {what} to another function or a computed jump's target"
        if ins.base in _WRITES and operand >= 0 and "[" in ins.operands[operand]:
            return STATE + f"{head} writes {what}"
        return STATE + f"{head} uses the address of {what} other than to read it"
