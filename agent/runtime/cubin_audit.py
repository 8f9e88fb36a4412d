"""What a compiled candidate may not contain: state that outlives a launch.

A kernel that keeps results in mutable ``__device__`` globals (or in the device
heap, through ``malloc``) can compute once and replay afterwards: launch counters,
cached outputs, input-keyed memoisation. Timed launches would then measure a copy.
Such state is visible in the CUBIN itself, whatever the source did to hide it:
the ``.nv.global`` (zero-initialised) and ``.nv.global.init`` sections hold the
module's mutable globals, and a device-side ``malloc``/``free`` is an undefined
function symbol. ``__constant__`` data and ``printf`` are allowed: constant memory is
read-only to a kernel unless it takes a generic address of it, which the compile process
refuses in the PTX (agent/runtime/ptx_audit.py's constant_writes). Scratch memory a program needs is the workload's business (workspace
buffers, zeroed or poisoned by the harness before every launch), not the module's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_STATE_SECTIONS = (".nv.global", ".nv.global.init")
_HEAP_FUNCTIONS = ("malloc", "free", "__nv_aligned_device_malloc")
SHT_SYMTAB, SHN_UNDEF = 2, 0


@dataclass(frozen=True)
class CubinState:
    global_bytes: int  # mutable __device__ globals, all sections together
    globals: tuple[str, ...]  # their symbol names
    heap_calls: tuple[str, ...]  # device-heap functions the code calls

    def refusal(self) -> str:
        """One line saying why the kernel is refused, or '' if it keeps no state."""
        parts = []
        if self.global_bytes:
            names = ", ".join(self.globals[:5]) + (" ..." if len(self.globals) > 5 else "")
            parts.append(f"{self.global_bytes} B of mutable __device__ globals ({names or 'unnamed'})")
        if self.heap_calls:
            parts.append("device-side " + "/".join(self.heap_calls))
        if not parts:
            return ""
        return ("kernels may not keep state between launches: " + " and ".join(parts)
                + "; compute every output on every launch (__constant__ data and local/shared memory are fine)")


def audit_cubin(image: bytes) -> CubinState:
    """Read the ELF64 section and symbol tables of a CUBIN (little-endian)."""
    if image[:4] != b"\x7fELF" or image[4] != 2:
        raise ValueError("not an ELF64 CUBIN")
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]

    def name_at(table: int, offset: int) -> str:
        start = sections[table][4] + offset
        return image[start:image.index(b"\0", start)].decode(errors="replace")

    names = [name_at(shstrndx, s[0]) for s in sections]
    state_index = {i for i, n in enumerate(names) if n in _STATE_SECTIONS}
    global_bytes = sum(sections[i][5] for i in state_index)
    globals_, heap = [], []
    for s in sections:
        if s[1] != SHT_SYMTAB:
            continue
        offset, size, strtab, entsize = s[4], s[5], s[6], s[9] or 24
        for k in range(size // entsize):
            st_name, _info, _other, st_shndx, _value, _size = struct.unpack_from("<IBBHQQ", image, offset + k * entsize)
            sym = name_at(strtab, st_name) if st_name else ""
            if st_shndx in state_index and sym and not sym.startswith("."):  # skip section symbols
                globals_.append(sym)
            elif st_shndx == SHN_UNDEF and sym in _HEAP_FUNCTIONS:
                heap.append(sym)
    return CubinState(global_bytes, tuple(globals_), tuple(sorted(set(heap))))
