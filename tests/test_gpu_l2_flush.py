"""The harness's cold flush on a GPU: installed as the worker installs it, a cold timing
loop runs with it. Whether hints outlive it is a speed question, measured by
benchmarks/cold_hints.py."""

from __future__ import annotations

import numpy as np
import pytest

from warpsmith.agent.runtime import compiler, l2_flush, native

pytestmark = pytest.mark.gpu

TOUCH = r"""extern "C" __global__ void touch(float* y) { y[threadIdx.x] += 1.0f; }"""


def test_a_cold_loop_flushes_with_the_harness_kernels():
    """20 timed launches with the flush: every sample is positive, the kernel ran once
    per launch (warm-up included)."""
    device = native.open_device(0)
    l2_flush.install(device)
    compiled = compiler.compile_kernel(TOUCH, "", device.facts.arch, filename="touch.cu")
    assert compiled.ok, compiled.log
    module = device.load_module(compiled.cubin)
    y = device.alloc(32 * 4)
    y.fill_u32(0, 0, 32 * 4)
    settings = native.TimingSettings(warmup=3, repetitions=20, flush_l2=True, max_total_ms=1000.0)
    result = device.time(module.function("touch"), (1, 1, 1), (32, 1, 1), 0, [("ptr", y.ptr)], settings)
    device.synchronize()
    assert len(result.samples_ms) == 20 and min(result.samples_ms) > 0
    out = np.empty(32, np.float32)
    y.download(out)
    assert (out == 23.0).all()  # 3 warm-up + 20 timed launches
