"""The GPU's own ceilings, measured once per GPU (by UUID) in the worker and cached.

Two kernels, timed by the runner's own loop (events, warm-up):
- copy: 1 GiB read + 1 GiB written with 16-byte loads, far past the L2, so the
  figure is what a memory-bound kernel can really reach (a copy, not the
  datasheet's peak);
- read: 1 GiB read with 16-byte loads and nothing written (a read-only stream runs
  faster than a copy: agent/spec/speed_of_light.py splits a case's bytes into both);
- fma: independent fp32 FMA chains in every thread of a full grid, so the figure
  is the fp32 rate at the clocks the card runs now (TF32 and tensor cores are off
  in warpsmith's numbers, so this is the compute ceiling that applies).
The best of a few launch shapes is kept: a ceiling is a best case.
"""

from __future__ import annotations

import datetime
import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..runtime.compiler import compile_kernel
from ..runtime.device_facts import DeviceFacts
from ..spec.speed_of_light import Ceilings, save_ceilings, tensor_peak_tflops

if TYPE_CHECKING:
    from ..runtime.native import Device, Function, KernelArg

COPY_BYTES = 1 << 30
FMA_CHAINS, FMA_ITERS, FMA_THREADS = 8, 8192, 256
PROBE_SOURCE = (f"#define CHAINS {FMA_CHAINS}\n"
                + (Path(__file__).with_name("cuda") / "ceilings_probe.cu").read_text())


def _median_ms(device: Device, fn: Function, grid: tuple[int, int, int], block: int,
               kernel_args: Sequence[KernelArg]) -> float:
    from ..runtime import native
    settings = native.TimingSettings(warmup=3, repetitions=20, flush_l2=False, max_total_ms=400.0)
    return statistics.median(device.time(fn, grid, (block, 1, 1), 0, kernel_args, settings).samples_ms)


def measure_ceilings(device: Device, facts: DeviceFacts) -> Ceilings:
    """Measure copy and read bandwidth and the fp32 FMA rate on an open runner device."""
    module = {}
    for entry in ("ws_copy", "ws_read", "ws_fma"):
        compiled = compile_kernel(PROBE_SOURCE, entry, facts.arch)
        if not compiled.ok:
            raise RuntimeError(f"ceiling probe {entry} did not compile: {compiled.error}")
        module[entry] = device.load_module(compiled.cubin).function(compiled.symbol)
    sms = facts.sm_count

    src, dst = device.alloc(COPY_BYTES), device.alloc(COPY_BYTES)
    src.fill_u32(0x3F800000, 0, COPY_BYTES)
    n16 = COPY_BYTES // 16
    copy_ms = min(_median_ms(device, module["ws_copy"], (blocks, 1, 1), 256, [("ptr", src.ptr), ("ptr", dst.ptr), ("i64", n16)])
                  for blocks in (sms * 8, sms * 32, (n16 + 255) // 256))
    out = device.alloc(4)
    read_ms = min(_median_ms(device, module["ws_read"], (blocks, 1, 1), 256, [("ptr", src.ptr), ("i64", n16), ("ptr", out.ptr)])
                  for blocks in (sms * 8, sms * 32, (n16 + 255) // 256))
    del src, dst

    fma_ms, threads = float("inf"), 0
    for per_sm in (8, 16):
        blocks = sms * per_sm
        ms = _median_ms(device, module["ws_fma"], (blocks, 1, 1), FMA_THREADS,
                        [("ptr", out.ptr), ("i32", FMA_ITERS), ("f32", 0.999), ("f32", 0.001)])
        if ms < fma_ms:
            fma_ms, threads = ms, blocks * FMA_THREADS
    flops = 2.0 * threads * FMA_ITERS * FMA_CHAINS
    when = datetime.date.today().isoformat()
    return Ceilings(bandwidth_gbs=round(2 * COPY_BYTES / (copy_ms * 1e-3) / 1e9, 1),
                    fp32_tflops=round(flops / (fma_ms * 1e-3) / 1e12, 2),
                    source=f"measured on this GPU {when}", tensor_tflops=tensor_peak_tflops(facts),
                    read_gbs=round(COPY_BYTES / (read_ms * 1e-3) / 1e9, 1))


def ensure_ceilings(device: Device, facts: DeviceFacts) -> Ceilings:
    """The cached ceilings of this GPU, measured now if there are none yet (about a second)."""
    from ..spec.speed_of_light import load_ceilings
    cached = load_ceilings(facts)
    if cached is not None and cached.source != "datasheet" and cached.read_gbs is not None \
            and math.isfinite(cached.read_gbs) and cached.read_gbs > 0:
        return cached  # (a cache from before the read probe, or with an unusable rate, is measured again)
    ceilings = measure_ceilings(device, facts)
    save_ceilings(facts, ceilings)
    return ceilings
