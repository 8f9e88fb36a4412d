"""The parts of a CUBIN (an ELF64 image, little-endian) the audits read: its sections, its
symbols, its relocations, and each kernel's parameters as ptxas laid them out in the
launch's constant bank (the ``.nv.info.<kernel>`` attributes).

Reading is strict: an image whose tables point outside it raises ValueError, which the
audits take as a refusal, never as an empty answer."""

from __future__ import annotations

import struct
from dataclasses import dataclass

SHT_SYMTAB, SHT_RELA, SHT_REL = 2, 4, 9
STT_FUNC = 2
# .nv.info attributes (format 4: a 16-bit size, then that many bytes).
_EIATTR_KPARAM_INFO = 0x17  # one parameter: ordinal, offset, size
_EIATTR_PARAM_CBANK = 0x0A  # where the parameters start in bank 0, and their total size


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


@dataclass(frozen=True)
class Symbol:
    name: str
    section: int  # index of the section it is defined in (0: undefined)
    type: int  # STT_*
    value: int


@dataclass(frozen=True)
class Relocation:
    offset: int  # in the section it patches
    symbol: Symbol


@dataclass(frozen=True)
class Parameters:
    """A kernel's parameters in bank 0: the first's offset (``base``) and each one's
    (offset from base, bytes)."""

    base: int
    spans: tuple[tuple[int, int], ...]

    def covers(self, offset: int, size: int) -> bool:
        """Whether every byte of [offset, offset + size) in bank 0 lies in a parameter."""
        return all(any(self.base + o <= b < self.base + o + n for o, n in self.spans)
                   for b in range(offset, offset + size))


class Cubin:
    """One image's tables, read once."""

    def __init__(self, image: bytes):
        if image[:4] != b"\x7fELF" or len(image) < 0x40 or image[4] != 2:
            raise ValueError("not an ELF64 CUBIN")
        self.image = image
        shoff, = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
        raw = [self._unpack("<IIQQQQIIQQ", shoff + i * shentsize) for i in range(shnum)]
        if not raw or shstrndx >= shnum:
            raise ValueError("a CUBIN without sections")
        names = raw[shstrndx]
        self.sections = [Section(self._string(names[4], s[0]), s[1], s[4], s[5], s[6], s[7], s[9]) for s in raw]
        for s in self.sections:
            if s.offset + (s.size if s.type != 8 else 0) > len(image):  # 8: SHT_NOBITS holds no bytes
                raise ValueError(f"section {s.name} lies outside the image")
        self.symbols = self._symbols()

    def _unpack(self, fmt: str, offset: int) -> tuple[int, ...]:
        if offset < 0 or offset + struct.calcsize(fmt) > len(self.image):
            raise ValueError("a table entry outside the image")
        return struct.unpack_from(fmt, self.image, offset)

    def _string(self, table_offset: int, offset: int) -> str:
        start = table_offset + offset
        end = self.image.find(b"\0", start)
        if start >= len(self.image) or end < 0:
            raise ValueError("a name outside the image")
        return self.image[start:end].decode(errors="replace")

    def _symbols(self) -> list[Symbol]:
        table = next((s for s in self.sections if s.type == SHT_SYMTAB), None)
        if table is None:
            return []
        strings = self.sections[table.link].offset
        out = []
        for k in range(table.size // (table.entsize or 24)):
            st_name, info, _other, shndx, value, _size = self._unpack("<IBBHQQ", table.offset + k * (table.entsize or 24))
            out.append(Symbol(self._string(strings, st_name) if st_name else "", shndx, info & 0xF, value))
        return out

    def section_named(self, name: str) -> int:
        """The index of the section called `name`; -1 if none."""
        return next((i for i, s in enumerate(self.sections) if s.name == name), -1)

    def relocations(self) -> dict[str, list[Relocation]]:
        """Every relocation, by the name of the section it patches (``.nv.constant4``, ``.text.k``)."""
        out: dict[str, list[Relocation]] = {}
        for s in self.sections:
            if s.type not in (SHT_RELA, SHT_REL):
                continue
            size = s.entsize or (24 if s.type == SHT_RELA else 16)
            target = self.sections[s.info].name if s.info < len(self.sections) else "?"
            for k in range(s.size // size):
                offset, info = self._unpack("<QQ", s.offset + k * size)
                index = info >> 32
                if index >= len(self.symbols):
                    raise ValueError(f"a relocation in {s.name} names no symbol")
                out.setdefault(target, []).append(Relocation(offset, self.symbols[index]))
        return out

    def parameters(self) -> dict[str, Parameters]:
        """Each kernel's parameters, by the name of its code section (``.text.k``)."""
        out: dict[str, Parameters] = {}
        for s in self.sections:
            if not s.name.startswith(".nv.info.") or s.info >= len(self.sections):
                continue
            base, spans, at = -1, [], s.offset
            while at + 4 <= s.offset + s.size:
                fmt, attr, size = self._unpack("<BBH", at)
                if fmt != 4:  # a 16-bit value in place of the size: no payload
                    at += 4
                    continue
                if attr == _EIATTR_KPARAM_INFO and size >= 12:
                    _index, _ordinal, offset, flags = self._unpack("<IHHI", at + 4)
                    spans.append((offset, flags >> 18))
                elif attr == _EIATTR_PARAM_CBANK and size >= 8:
                    base = self._unpack("<IHH", at + 4)[1]
                at += 4 + size
            if base < 0:
                raise ValueError(f"{s.name} does not say where the parameters start")
            out[self.sections[s.info].name] = Parameters(base, tuple(sorted(spans)))
        return out
