"""The register scrub on the CPU, with real NVRTC and nvdisasm: each layout's machine code
writes every register ptxas hands a thread at its allocation, ptxas hands a kernel no
register above that, and the layouts together cover each other's holes."""

from __future__ import annotations

import re

import pytest

from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.runtime.sass import disassemble, nvdisasm
from warpsmith.agent.runtime.sass_flow import destinations
from warpsmith.agent.runtime.sass_listing import parse_listing
from warpsmith.agent.worker.register_scrub import GRANULE, LAYOUTS, allocation, compile_layout, words

pytestmark = pytest.mark.skipif(nvdisasm() is None, reason="nvdisasm (the nvidia-cuda-nvdisasm wheel) not installed")

REGS_PER_SM = 65536
LANE_FILE = REGS_PER_SM // 4 // 32  # registers per lane in one of the SM's four sub-partitions


def _general(names: set[str]) -> set[int]:
    return {int(n[1:]) for n in names if re.fullmatch(r"R\d+", n)}


def _named(cubin: bytes) -> set[int]:
    """The general registers the entry names anywhere."""
    (fn,) = [f for f in parse_listing(disassemble(cubin)) if f.entry]
    return _general({r for ins in fn.instructions for op in ins.operands for r in re.findall(r"(?<![\w.])U?R\d+", op)})


def _written_on_every_path(cubin: bytes) -> set[int]:
    """The general registers every path from the entry to an EXIT writes: a guarded
    instruction may not run, and where paths join only what both wrote counts (the scrub
    runs its `keep == 0` path, which must write them all)."""
    (fn,) = [f for f in parse_listing(disassemble(cubin)) if f.entry]
    every = {d for ins in fn.instructions for d in destinations(ins)[1]}
    before: list[set[str] | None] = [None] * len(fn.instructions)
    before[0] = set()
    changed = True
    while changed:
        changed = False
        for i, ins in enumerate(fn.instructions):
            state = before[i]
            if state is None:
                continue
            after = state if ins.guard else state | set(destinations(ins)[1])
            for j in fn.successors[i]:
                joined = set(after) if before[j] is None else before[j] & after
                if joined != before[j]:
                    before[j], changed = joined, True
    exits = [before[i] for i, ins in enumerate(fn.instructions) if ins.base == "EXIT" and not ins.guard]
    assert exits and all(e is not None for e in exits)
    return _general(set.intersection(*[e for e in exits if e is not None]) & every)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
@pytest.mark.parametrize("threads", LAYOUTS)
def test_each_layout_writes_every_register_of_its_allocation(arch, threads):
    compiled = compile_layout(arch, REGS_PER_SM, threads)
    assert compiled.ok, compiled.log
    assert compiled.resources.registers == allocation(REGS_PER_SM, threads), compiled.resources.text()
    assert compiled.resources.spill_stores == 0, compiled.resources.text()
    top = allocation(REGS_PER_SM, threads) - 3
    assert set(range(top + 1)) <= _written_on_every_path(compiled.cubin)


HUNGRY = """
extern "C" __global__ void __launch_bounds__(THREADS, 1) k(const float* in, float* out) {
  float v[400];
#pragma unroll
  for (int i = 0; i < 400; ++i) v[i] = in[i * blockDim.x + threadIdx.x];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 400; ++i) s += v[i] * v[399 - i];
  out[threadIdx.x] = s;
}
"""


@pytest.mark.parametrize("threads", LAYOUTS)
def test_ptxas_hands_no_kernel_a_register_above_the_scrubbed_ones(threads):
    """A kernel that wants more registers than it may have uses R0 to its allocation less
    three and spills the rest: the registers above are never a kernel's to read."""
    compiled = compile_kernel(HUNGRY.replace("THREADS", str(threads)), "k", "sm_90", filename="hungry.cu",
                              use_cache=False)
    assert compiled.ok, compiled.log
    assert compiled.resources.spill_stores > 0  # it did want more
    assert max(_named(compiled.cubin)) <= words(REGS_PER_SM, threads)


def test_the_layouts_cover_each_others_holes():
    """Warps laid side by side over a sub-partition's file, from its start: whatever a warp
    of any allocation can read is written by some layout, though each layout alone leaves
    the top three registers of its warps' allocations unwritten."""
    written: set[int] = set()
    alone = []
    for threads in LAYOUTS:
        size = -(-allocation(REGS_PER_SM, threads) // GRANULE) * GRANULE  # the hardware's step
        mine = {base + r for base in range(0, LANE_FILE - size + 1, size)
                for r in range(allocation(REGS_PER_SM, threads) - 2)}
        alone.append(mine)
        written |= mine
    readable = {base + r for size in range(GRANULE, 256 + 1, GRANULE) for base in range(0, LANE_FILE - size + 1, GRANULE)
                for r in range(min(size, 255) - 2)}
    assert readable <= written
    assert all(not readable <= mine for mine in alone)
