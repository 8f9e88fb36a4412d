"""CUDA IPC between two processes, each with its own context, through the runner: a buffer
of one process read in the other, and each process's stream ordered after the other's work
by events alone (no host wait between them)."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from warpsmith.agent.runtime import compiler, native

pytestmark = pytest.mark.gpu

N = 1 << 20
# `slow_fill` spins about `cycles` clocks before it writes, so a reader not ordered after it
# would see the old contents; `copy` reads the mapped buffer into one of the reader's own.
KERNELS = r"""
extern "C" __global__ void slow_fill(unsigned* a, unsigned n, unsigned value, long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] = value + i;
}
extern "C" __global__ void copy(const unsigned* a, unsigned* b, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) b[i] = a[i];
}
"""
SPIN = 20_000_000_000  # about 10 s at a Hopper clock: longer than the reader takes to start


def _module(device):
    compiled = compiler.compile_kernel(KERNELS, "", device.facts.arch, filename="ipc_kernels.cu")
    assert compiled.ok, compiled.log
    return device.load_module(compiled.cubin)


def _reader(memory: bytes, written: bytes, conn) -> None:
    """The other process: waits on the writer's event (on its stream), copies the mapped
    buffer, then slowly overwrites it with 7 + i and records its own event for the writer."""
    try:
        device = native.open_device(0)
        module = _module(device)
        mapped = native.IpcMapping(device, memory, 4 * N)
        writer = native.IpcEvent(device, written)
        writer.wait()
        mine = device.alloc(4 * N)
        device.launch(module.function("copy"), (264, 1, 1), (256, 1, 1), 0,
                      [("ptr", mapped.ptr), ("ptr", mine.ptr), ("i32", N)])
        pending = not writer.done()  # else the fill was over before this copy, waited or not
        done = native.IpcEvent(device)
        device.launch(module.function("slow_fill"), (264, 1, 1), (256, 1, 1), 0,
                      [("ptr", mapped.ptr), ("i32", N), ("i32", 7), ("i64", SPIN)])
        done.record()
        conn.send(("done", (done.handle(), pending)))
        seen = np.empty(N, np.uint32)
        mine.download(seen)
        conn.send(("seen", seen))
        conn.recv()  # the writer has waited on `done`: the event and the mapping may go
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails with it
        conn.send(("error", f"{type(e).__name__}: {e}"))


def _receive(conn, timeout_s: float = 120.0):
    assert conn.poll(timeout_s), "no answer from the reader"
    return conn.recv()


def test_each_process_is_ordered_after_the_others_work_by_ipc_events():
    device = native.open_device(0)
    module = _module(device)
    buffer = device.alloc(4 * N)
    buffer.fill_u32(0, 0, 4 * N)
    written = native.IpcEvent(device)
    parent, child = mp.get_context("spawn").Pipe()
    reader = mp.get_context("spawn").Process(target=_reader, args=(native.ipc_memory_handle(device, buffer),
                                                                    written.handle(), child))
    # The slow fill and its event are enqueued before the reader starts: the reader's wait
    # finds the record in place, and its copy must follow the fill, which is still spinning.
    device.launch(module.function("slow_fill"), (264, 1, 1), (256, 1, 1), 0,
                  [("ptr", buffer.ptr), ("i32", N), ("i32", 1000), ("i64", SPIN)])
    written.record()
    reader.start()
    try:
        kind, value = _receive(parent)
        assert kind == "done", value
        handle, pending = value
        assert pending, "the writer's fill ended before the reader's copy was enqueued: SPIN is too short to test the wait"
        native.IpcEvent(device, handle).wait()  # our stream after the reader's slow overwrite
        after = device.alloc(4 * N)
        device.launch(module.function("copy"), (264, 1, 1), (256, 1, 1), 0,
                      [("ptr", buffer.ptr), ("ptr", after.ptr), ("i32", N)])
        ours = np.empty(N, np.uint32)
        after.download(ours)
        kind, seen = _receive(parent)
        assert kind == "seen", seen
        parent.send("bye")
    finally:
        reader.join(timeout=60)
        if reader.is_alive():
            reader.kill()
    index = np.arange(N, dtype=np.uint32)
    assert (seen == 1000 + index).all(), "the reader's copy ran before the writer's fill finished"
    assert (ours == 7 + index).all(), "the writer's copy ran before the reader's overwrite finished"
