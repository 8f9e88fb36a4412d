"""Registers a kernel never wrote, read on a GPU: a kernel that fills its registers with marked
values, then the harness's scrub (or nothing, the control), then a kernel that reads
registers nothing wrote. With the scrub no marked value reaches the reader, at any register
allocation of either kernel; without it the reader finds them, which shows the channel
exists on this GPU (skipped if it does not)."""

from __future__ import annotations

import numpy as np
import pytest

from warpsmith.agent.runtime import compiler, native
from warpsmith.agent.worker.register_scrub import allocation

pytestmark = pytest.mark.gpu

MARK = 0x5EED0000

# Each thread holds WORDS values at once: the marks, loaded as they are (volatile loads run on
# every path, where an OR after them could be moved into the branch), or, in the reader,
# loaded only when `keep`. `keep` is 0, but ptxas cannot know it: the marker's values stay
# live to the end, and the reader stores registers that nothing wrote on the path its
# launches take.
MARKER = """
extern "C" __global__ void __launch_bounds__(THREADS, 1) mark(const unsigned* marks, unsigned* sink, int keep) {
  unsigned v[WORDS];
  volatile const unsigned* m = marks;
#pragma unroll
  for (int i = 0; i < WORDS; ++i) v[i] = m[i];
  if (keep) {
#pragma unroll
    for (int i = 0; i < WORDS; ++i) sink[i] = v[i];
  }
}
"""
READER = """
extern "C" __global__ void __launch_bounds__(THREADS, 1) read(const unsigned* marks, unsigned* out, int keep) {
  unsigned v[WORDS];
  volatile const unsigned* m = marks;
  if (keep) {
#pragma unroll
    for (int i = 0; i < WORDS; ++i) v[i] = m[i];
  }
  unsigned* mine = out + ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * WORDS;
#pragma unroll
  for (int i = 0; i < WORDS; ++i) mine[i] = v[i];
}
"""


def source(template: str, threads: int) -> str:
    """The kernel at `threads` a block, holding as many values as leave ptxas room without spilling."""
    return template.replace("THREADS", str(threads)).replace("WORDS", str(allocation(65536, threads) - 8))


def _function(device, template: str, threads: int, entry: str):
    compiled = compiler.compile_kernel(source(template, threads), entry, device.facts.arch, filename=f"{entry}.cu",
                                       use_cache=False)
    assert compiled.ok, compiled.log
    assert compiled.resources.spill_stores == 0, compiled.resources.text()  # the values are in registers
    return device.load_module(compiled.cubin).function(entry)


def _marks_found(device, checks, mark_threads: int, read_threads: int, scrub: bool) -> int:
    sms = device.facts.sm_count
    marks = device.alloc(4 * 256)
    marks.upload(np.arange(256, dtype=np.uint32) | np.uint32(MARK))
    blocks = sms * max(1, device.facts.max_threads_per_sm // read_threads)
    out = device.alloc(4 * 256 * blocks * read_threads)
    out.fill_u32(0, 0, out.nbytes)
    marker = _function(device, MARKER, mark_threads, "mark")
    reader = _function(device, READER, read_threads, "read")
    found = 0
    for _ in range(3):
        device.launch(marker, (sms * max(1, device.facts.max_threads_per_sm // mark_threads), 1, 1),
                      (mark_threads, 1, 1), 0, [("ptr", marks.ptr), ("ptr", out.ptr), ("i32", 0)])
        if scrub:
            checks.scrub(0)
        device.launch(reader, (blocks, 1, 1), (read_threads, 1, 1), 0, [("ptr", marks.ptr), ("ptr", out.ptr), ("i32", 0)])
        device.synchronize()
        seen = np.empty(out.nbytes // 4, dtype=np.uint32)
        out.download(seen)
        found += int(((seen & 0xFFFF0000) == MARK).sum())
    return found


@pytest.mark.parametrize("mark_threads, read_threads", [(256, 256), (256, 384), (384, 512), (512, 640), (640, 256), (1024, 384), (768, 1024)])
def test_no_register_a_kernel_left_reaches_the_next_past_the_scrub(mark_threads, read_threads):
    from warpsmith.agent.worker.gpu_checks import GpuChecks
    device = native.open_device(0)
    checks = GpuChecks(device, device.facts.arch)
    assert checks.holds_short == []
    control = _marks_found(device, checks, mark_threads, read_threads, scrub=False)
    scrubbed = _marks_found(device, checks, mark_threads, read_threads, scrub=True)
    assert scrubbed == 0, f"{scrubbed} marked registers read past the scrub ({control} without it)"
    if control == 0:
        pytest.skip("without the scrub no marked register was read either: this GPU cleared them between kernels")
