"""nvdisasm's listing of a CUBIN's code, read into functions of instructions: each with its
guard, opcode (with modifiers), operands, and the instructions control may pass to next.

The listing is nvdisasm's, not the source's: names in it are symbols (a kernel's, a
device function's, a label ``.L_x_12``), never text a source wrote. A line that starts
like an instruction but does not read as one raises ValueError: the audits refuse what
they cannot read."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SECTION = re.compile(r"^\s*\.section\s+([^,\s]+)", re.M)
_LINE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;\s*(?:/\*.*\*/)?\s*$")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):\s*$")
_ENTRY = re.compile(r'^\s*\.other\s+\S+,\s*@"STO_CUDA_ENTRY')
_GUARD = re.compile(r"@!?U?P(?:T|\d+)\s+")
_OPCODE = re.compile(r"([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*(.*)", re.S)
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_CONTROL = {"EXIT", "RET", "BRA", "JMP", "BRX", "JMX", "KILL", "CALL", "BSSY", "WARPSYNC", "BREAK", "BPT"}
REGISTER = re.compile(r"(?<![\w.])(U?R\d+|U?P\d+)(?![\w])")  # R7, UR12, P0, UP1 (RZ, URZ, PT, UPT are constants)


@dataclass(frozen=True)
class Instruction:
    address: int
    guard: str  # '' or '@P0', '@!UP1'...
    opcode: str  # with its modifiers: 'LDG.E.64'
    operands: tuple[str, ...]

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    def text(self) -> str:
        """The instruction as a refusal quotes it: nvdisasm's spelling, on one line."""
        return f"{self.guard + ' ' if self.guard else ''}{self.opcode} {', '.join(self.operands)}".strip()


@dataclass(frozen=True)
class Function:
    section: str  # '.text.k'
    entry: bool  # a kernel (STO_CUDA_ENTRY), not a device function
    instructions: tuple[Instruction, ...]
    successors: tuple[tuple[int, ...], ...]  # by instruction index


def split_operands(text: str) -> tuple[str, ...]:
    """Operands split at the commas outside brackets, braces and parentheses."""
    if "{" not in text and "(" not in text:  # no comma inside brackets in nvdisasm's operands
        return tuple(p.strip() for p in text.split(",")) if text.strip() else ()
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return tuple(out + ([last] if last else []))


def parse_listing(listing: str) -> list[Function]:
    """Every code section of nvdisasm's ``-c`` listing, one function each."""
    functions: list[Function] = []
    starts = [(m.start(), m.group(1)) for m in _SECTION.finditer(listing)]
    for k, (start, name) in enumerate(starts):
        if not name.startswith(".text."):
            continue
        end = starts[k + 1][0] if k + 1 < len(starts) else len(listing)
        functions.append(_function(name, listing[start:end]))
    return functions


def _function(section: str, text: str) -> Function:
    instructions: list[Instruction] = []
    labels: dict[str, int] = {}
    entry = False
    for line in text.splitlines():
        if _ENTRY.match(line):
            entry = True
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        if not line.lstrip().startswith("/*"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"an instruction nvdisasm wrote in a form the audit cannot read in {section}")
        body = m.group(2)
        guard = _GUARD.match(body)
        rest = body[guard.end():] if guard else body
        op = _OPCODE.fullmatch(rest)
        if op is None:
            raise ValueError(f"an instruction nvdisasm wrote in a form the audit cannot read in {section}")
        instructions.append(Instruction(int(m.group(1), 16), guard.group().strip() if guard else "", op.group(1),
                                        split_operands(op.group(2))))
    return Function(section, entry, tuple(instructions), _successors(instructions, labels))


def _successors(instructions: list[Instruction], labels: dict[str, int]) -> tuple[tuple[int, ...], ...]:
    """Where control may go after each instruction: the next one unless an unguarded jump or
    exit ends the path, and a branch's label; an indirect jump may reach any label."""
    everywhere = tuple(sorted(set(labels.values())))
    out: list[tuple[int, ...]] = []
    for i, ins in enumerate(instructions):
        if ins.base not in _CONTROL:
            out.append((i + 1,) if i + 1 < len(instructions) else ())
            continue
        always = ins.guard in ("", "@PT", "@UPT")
        nexts: list[int] = []
        if not (always and ins.base in ("EXIT", "RET", "BRA", "JMP", "BRX", "JMX", "KILL")):
            nexts.append(i + 1)
        if ins.base in ("BRA", "JMP", "BRX", "JMX", "CALL", "BSSY", "WARPSYNC", "BREAK", "BPT"):
            targets = [labels[t] for t in _TARGET.findall(" ".join(ins.operands)) if t in labels]
            nexts += targets
            if ins.base in ("BRX", "JMX"):
                nexts += everywhere
        out.append(tuple(sorted({n for n in nexts if n < len(instructions)})))
    return tuple(out)
