"""The register-file scrub (cuda/register_scrub.cu): every SM's registers overwritten before
a judged or timed launch, as its shared memory and every thread slot's local window are.

One layout is one block per SM whose warps take the whole register file, each thread
holding as many values as its allocation has registers ptxas hands out. ptxas gives a
thread at most its allocation less three (R0 to R252 of 255 at 256 threads a block), so
one layout leaves the top of each warp's allocation unwritten. Taking a warp's allocation
to be a run of each lane's registers in its SM sub-partition, laid from the start at the
allocation granule (the hardware does not document its layout), the three layouts below
leave those holes at different places and together write every register a kernel of any
allocation can read (tests/test_register_scrub.py); tests/test_gpu_register_scrub.py
checks on the GPU that no marked register survives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..runtime import compiler

if TYPE_CHECKING:
    from ..runtime.native import Device, Function

CUDA = Path(__file__).with_name("cuda")
SOURCE = (CUDA / "hold.cuh").read_text() + (CUDA / "register_scrub.cu").read_text()

LAYOUTS = (256, 384, 512)  # threads a block: 255, 168 and 128 registers a thread on a 64K-register SM
MOST_REGISTERS = 255  # a thread's most (R255 is RZ)
GRANULE = 8  # a thread's registers are allocated in steps of this many


def allocation(regs_per_sm: int, threads: int) -> int:
    """The registers a thread of a `threads`-thread block gets when one block fills the SM."""
    return min(MOST_REGISTERS, regs_per_sm // threads // GRANULE * GRANULE)


def words(regs_per_sm: int, threads: int) -> int:
    """Values a scrub thread holds at once: every register ptxas hands out at that allocation."""
    return allocation(regs_per_sm, threads) - 3


def compile_layout(arch: str, regs_per_sm: int, threads: int) -> compiler.CompiledKernel:
    return compiler.compile_kernel(SOURCE, "ws_scrub_registers", arch,
                                   [f"-DWS_REGISTER_THREADS={threads}", f"-DWS_REGISTER_WORDS={words(regs_per_sm, threads)}"],
                                   filename="warpsmith_scrub_registers.cu")


def hold_name(threads: int) -> str:
    """The layout's name among the holding scrubs (GpuChecks.HOLDS)."""
    return f"register scrub, {threads} threads a block"


@dataclass(frozen=True)
class _Layout:
    threads: int
    function: Function


class RegisterScrub:
    """The layouts compiled and loaded once per worker; `launch` enqueues them all."""

    def __init__(self, device: Device, arch: str):
        self.device = device
        regs = device.facts.regs_per_sm or 65536
        self._layouts: list[_Layout] = []
        self.short: list[str] = []  # layouts whose loaded kernel got fewer registers than planned
        for threads in LAYOUTS:
            compiled = compile_layout(arch, regs, threads)
            if not compiled.ok:
                raise RuntimeError(f"warpsmith's register scrub failed to compile:\n{compiled.log}")
            fn = device.load_module(compiled.cubin).function(compiled.symbol)
            if fn.info.registers < allocation(regs, threads):
                self.short.append(f"{hold_name(threads)}: {fn.info.registers} registers a thread where "
                                  f"{allocation(regs, threads)} fill the SM")
            self._layouts.append(_Layout(threads, fn))

    def launch(self, arrival_counter: Callable[[str], int]) -> None:
        """Every layout, a block per SM (enqueued only); each holds on its own arrival counter."""
        sms = max(1, self.device.facts.sm_count)
        for layout in self._layouts:
            self.device.launch(layout.function, (sms, 1, 1), (layout.threads, 1, 1), 0,
                               [("ptr", arrival_counter(hold_name(layout.threads))), ("i32", 0)])
