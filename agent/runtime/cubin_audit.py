"""What a compiled candidate may not do: keep state that outlives a launch.

A kernel that keeps results in mutable ``__device__`` globals (or in the device heap,
through ``malloc``) can compute once and replay afterwards: launch counters, cached
outputs, input-keyed memoisation, a super-batch computed at the first launch and served
at the later ones. Timed launches would then measure a copy. Such state is visible in the
CUBIN itself, whatever the source did to hide it: the ``.nv.global`` (zero-initialised)
and ``.nv.global.init`` sections hold the module's globals, a device-side
``malloc``/``free`` is an undefined function symbol, and the machine code shows what
each global's address is used for (agent/runtime/sass_memory.py: written, atomically
updated, stored, compared, passed to a call, or only read from).

Refused: any device-heap call; any use of a global's address other than a read (the
SASS findings); and, where the SASS could not be read, any global at all. A
``__device__`` table the code only reads, ``__constant__`` data read directly, and
shared and local memory are fine. ``printf`` and ``assert`` keep their strings in
``.nv.global.init`` and pass their addresses to a call: refused. Scratch memory a program
needs is the workload's business (workspace buffers, zeroed or poisoned by the harness
before every launch), not the module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .cubin_elf import Cubin

_STATE_SECTIONS = (".nv.global", ".nv.global.init")
_HEAP_FUNCTIONS = ("malloc", "free", "__nv_aligned_device_malloc")


@dataclass(frozen=True)
class CubinState:
    global_bytes: int  # __device__ globals, all sections together
    globals: tuple[str, ...]  # their symbol names
    heap_calls: tuple[str, ...]  # device-heap functions the code calls

    def refusal(self, state_ops: Optional[tuple[str, ...]]) -> str:
        """One line saying why the kernel is refused, or '' if it keeps no state. `state_ops`:
        the machine code's findings (CompiledKernel.state_ops); None where it was not read."""
        parts = []
        if self.heap_calls:
            parts.append("it calls device-side " + "/".join(self.heap_calls))
        if state_ops:
            parts.append("; ".join(state_ops[:2]) + (" ..." if len(state_ops) > 2 else ""))
        elif state_ops is None and self.global_bytes:
            names = ", ".join(self.globals[:5]) + (" ..." if len(self.globals) > 5 else "")
            parts.append(f"it has {self.global_bytes} B of __device__ globals ({names or 'unnamed'}) and its machine "
                         "code, which says how they are used, could not be read")
        if not parts:
            return ""
        strings = any("`$str" in p for p in parts)
        return ("kernels may not keep state between launches: " + "; ".join(parts)
                + "; compute every output on every launch from the launch's own arguments (__constant__ data, "
                "__device__ tables only read, shared and local memory are fine"
                + ("; printf and assert pass module strings to a call: remove them)" if strings else ")"))


def audit_cubin(image: bytes) -> CubinState:
    """The CUBIN's globals and device-heap calls, from its section and symbol tables."""
    cubin = Cubin(image)
    state_index = {i for i, s in enumerate(cubin.sections) if s.name in _STATE_SECTIONS}
    global_bytes = sum(cubin.sections[i].size for i in state_index)
    globals_ = [s.name for s in cubin.symbols if s.section in state_index and s.name and not s.name.startswith(".")]
    heap = {s.name for s in cubin.symbols if s.section == 0 and s.name in _HEAP_FUNCTIONS}
    return CubinState(global_bytes, tuple(globals_), tuple(sorted(heap)))
