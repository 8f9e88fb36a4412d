"""The integrity checks read together (GpuChecks.tally): a case's guard bands, moats, inputs
and references, and the sweep over every resident case, each with one wait. A double stands
in for the GPU's memory and the count and checksum kernels (their GPU side:
tests/test_gpu_adversarial.py, reference tampering, moats, inputs)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np

from warpsmith.agent.worker.case_buffers import GUARD_WORD, CaseBuffers, DeviceArray
from warpsmith.agent.worker.check_keys import CheckKeys
from warpsmith.agent.worker.gpu_checks import GpuChecks
from warpsmith.agent.worker.gpu_side import GpuWorker
from warpsmith.agent.worker.pages import ALLOC_GRANULE

_bases = itertools.count(ALLOC_GRANULE, ALLOC_GRANULE)


class DeviceDouble:
    """Word-addressed memory; runs ws_count_not and ws_checksum into their result slot; counts waits."""

    def __init__(self):
        self.memory: dict[int, int] = {}
        self.waits = 0
        self.facts = SimpleNamespace(sm_count=2)

    def alloc(self, nbytes):
        return BufferDouble(self, nbytes)

    def launch(self, fn, grid, block, smem, args):
        values = [v for _, v in args]
        if fn == "ws_count_not":
            ptr, value, n, slot = values
            count = sum(self.memory.get(ptr + 4 * i, 0) != value % (1 << 32) for i in range(n))
        else:  # the checksum's key from the key page, as ws_key_word reads it
            ptr, n, key_ptr, slot = values
            key = self.memory.get(key_ptr, 0)
            count = hash((key, tuple(self.memory.get(ptr + 4 * i, 0) for i in range(n)))) % (1 << 63)
        self.memory[slot] = self.memory.get(slot, 0) + count

    def synchronize(self):
        self.waits += 1


class BufferDouble:
    def __init__(self, device, nbytes):
        self.device, self.ptr, self.nbytes = device, next(_bases), nbytes

    def fill_u32(self, word, offset, nbytes):
        for addr in range(self.ptr + offset, self.ptr + offset + nbytes, 4):
            self.device.memory[addr] = word

    fill_u32_async = fill_u32

    def upload_async(self, words):  # the key page's u64 words
        for i, w in enumerate(words):
            self.device.memory[self.ptr + 8 * i] = int(w)

    def download(self, out):  # the tally's u64 slots, one per 8 bytes
        out[:] = [self.device.memory.get(self.ptr + 8 * i, 0) for i in range(len(out))]


def _checks(device):
    checks = GpuChecks.__new__(GpuChecks)  # the tally's state only: no checker module on this machine
    checks.device, checks._slots, checks._grid, checks.keys = device, None, 8, CheckKeys(device)
    checks._fn = {name: name for name in ("ws_count_not", "ws_checksum")}
    return checks


def _case(device, checks, name):
    """A case of one input A and one output C (with its reference), guarded, between two moats."""
    bufs = CaseBuffers.__new__(CaseBuffers)
    bufs.job, bufs.checks, bufs.arrays = SimpleNamespace(case=name), checks, {}
    for array, role in (("A", "input"), ("C", "output")):
        job = SimpleNamespace(name=array, role=role, dtype="float32", nbytes=64)
        a = DeviceArray(job, device.alloc(64 + 2 * 16), 16)
        a.buffer.fill_u32(0x3F800000, 16, 64)
        for _, offset in a.guard_offsets():
            a.buffer.fill_u32(GUARD_WORD, offset, 16)
        if role == "input":
            a.checksum, a.host = checks.checksum(a.ptr, 64), np.ones(16, np.float32)
        else:
            a.ref, a.ref_device = device.alloc(128), np.zeros(16)
            a.ref.fill_u32(0x12345678, 0, 128)
            a.ref_checksum = checks.checksum(a.ref.ptr, 128)
        bufs.arrays[array] = a
    bufs.moats = [device.alloc(32), device.alloc(32)]
    for m in bufs.moats:
        m.fill_u32(GUARD_WORD, 0, 32)
    return bufs


def test_a_tally_reads_every_result_in_order_after_one_wait():
    device = DeviceDouble()
    checks = _checks(device)
    buf = device.alloc(64)
    buf.fill_u32(5, 0, 64)
    buf.fill_u32(6, 0, 8)
    tally = checks.tally()
    first, second, third = tally.count_not(buf.ptr, 5, 64), tally.checksum(buf.ptr, 64), tally.count_not(buf.ptr, 6, 64)
    results = tally.read()
    assert device.waits == 1 and (first, second, third) == (0, 1, 2)
    assert results[first] == 2 and results[third] == 14 and results[second] == checks.checksum(buf.ptr, 64)
    again = checks.tally()
    again.count_not(buf.ptr, 5, 64)
    assert again.read() == [2]  # the slots are zeroed before each tally: no count carried over


def test_the_sweep_checks_every_resident_case_with_one_wait_and_reports_each_trespass():
    """Three resident cases: a clean one, one whose input a kernel overwrote, one whose moat it wrote. One wait
    for all of them; each trespass reported against its case, the input marked for restoring and the moat
    re-armed; guard bands are left to the case's next prepare."""
    device = DeviceDouble()
    checks = _checks(device)
    worker = GpuWorker.__new__(GpuWorker)
    worker.device, worker.checks = device, checks
    cases = [_case(device, checks, name) for name in ("clean", "input", "moat")]
    worker.cases = {(c.job.case, 1, ""): c for c in cases}
    restored = []
    for c in cases:
        c.restore = lambda c=c: restored.append(c.job.case)
    cases[1].arrays["A"].buffer.fill_u32(0, 16, 4)
    cases[2].moats[1].fill_u32(0, 0, 4)
    cases[0].arrays["C"].buffer.fill_u32(0, 0, 4)  # a guard band: not the sweep's
    device.waits = 0
    sent = []
    worker.sweep(sent.append)
    assert device.waits == 1 and restored == ["clean", "input", "moat"]
    assert [(m.case, m.check.status) for m in sent] == [("input", "input_modified"), ("moat", "out_of_bounds")]
    assert cases[1].arrays["A"].dirty and not cases[0].arrays["A"].dirty
    assert all(device.memory[cases[2].moats[1].ptr + o] == GUARD_WORD for o in range(0, 32, 4))
    assert worker.integrity(cases[0]).status == "out_of_bounds"  # a case's own check reads its guard bands
    assert "C (before)" in worker.integrity(cases[0]).detail


def test_a_programs_workspace_bands_are_read_in_the_same_wait():
    """A program's workspace guard bands are counted on the case's tally: one wait for all; a write past the
    workspace's end is out_of_bounds, named, once the case's own checks found nothing."""
    from warpsmith.agent.worker.program_run import ProgramRun
    device = DeviceDouble()
    checks = _checks(device)
    worker = GpuWorker.__new__(GpuWorker)
    worker.device, worker.checks = device, checks
    bufs = _case(device, checks, "split-k")
    run = ProgramRun.__new__(ProgramRun)
    w = SimpleNamespace(name="partial", buffer=device.alloc(16 + 64 + 16), guard=16, nbytes=64)
    w.buffer.fill_u32(GUARD_WORD, 0, 16)
    w.buffer.fill_u32(GUARD_WORD, 16 + 64, 16)
    run.workspace = {"partial": w}
    device.waits = 0
    assert worker.integrity(bufs, run) is None and device.waits == 1
    w.buffer.fill_u32(0, 16 + 64, 4)
    found = worker.integrity(bufs, run)
    assert found.status == "out_of_bounds" and "workspace partial (after)" in found.detail and device.waits == 2
