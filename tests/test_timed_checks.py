"""How the timed launches' check records are read back (agent/worker/timed_checks.py), on
the CPU: a double stands in for the GPU's memory and for the check and seal kernels, the
host side (GpuChecks.sealed, the keyed PRF's twin) is the real one. Their GPU side:
tests/test_gpu_adversarial.py::test_a_timed_check_rewritten_after_it_ran_is_caught_by_its_seal."""

from __future__ import annotations

import secrets
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np

from warpsmith.agent.worker.gpu_checks import STATS_WORDS, GpuChecks
from warpsmith.agent.worker.host_prf import prf
from warpsmith.agent.worker.timed_checks import TimedChecks

GRID = 4  # the check kernels' blocks


class SlotsDouble:
    def __init__(self, nbytes: int):
        self.ptr, self.nbytes, self.words = 0x7F0000400000, nbytes, np.zeros(nbytes // 8, dtype=np.uint64)

    def fill_u32(self, word: int, offset: int, nbytes: int) -> None:
        self.words.view(np.uint32)[offset // 4:(offset + nbytes) // 4] = word

    fill_u32_async = fill_u32

    def u32(self, ptr: int) -> np.ndarray:
        """The 4-byte words from device address ptr on."""
        return self.words.view(np.uint32)[(ptr - self.ptr) // 4:]

    def download(self, out: np.ndarray) -> None:  # as the runner's: out's size from the start
        out.reshape(-1)[:] = self.words[:out.size]


class ChecksDouble(GpuChecks):
    """GpuChecks' host side over SlotsDouble: the check writes each block's count, the seal
    sums them and tags the sum as ws_seal does."""

    def __init__(self):
        self._grid, self.slot_words = GRID, STATS_WORDS + GRID
        self.keys = SimpleNamespace(seal=(secrets.randbits(64), secrets.randbits(64)), on=nullcontext)
        self.slots: SlotsDouble | None = None
        self.bad = 0  # what the next check finds, spread over the blocks

    def scrub_shared(self):
        pass

    def _zero_arrivals(self):
        pass

    def clear_scratch(self):
        pass

    def scrub_local(self, local_bytes):
        pass

    def scrub_registers(self):
        pass

    def local_scrub(self, local_bytes):
        return None
    def enqueue_output_check(self, dtype, out_ptr, ref_ptr, nbytes, scale, rtol, stats_ptr):
        k = (stats_ptr - self.slots.ptr) // 8
        self.slots.words[k + STATS_WORDS:k + STATS_WORDS + GRID] = [self.bad // GRID + (b < self.bad % GRID)
                                                                    for b in range(GRID)]

    def enqueue_seal(self, stats_ptr, salt):
        k = (stats_ptr - self.slots.ptr) // 8
        total = int(self.slots.words[k + STATS_WORDS:k + STATS_WORDS + GRID].sum())
        self.slots.words[k + 6] = total
        self.slots.words[k + 7] = prf(self.keys.seal[0] ^ salt, self.keys.seal[1] ^ total, stats_ptr)
        for ptr, nbytes in self.sealed_rest(stats_ptr):  # the rest of the slot: the fence's keystream
            self.slots.u32(ptr)[:nbytes // 4] = [self.stream(salt, ptr + 4 * i) for i in range(nbytes // 4)]

    @staticmethod
    def stream(salt, addr):
        return hash((salt, addr)) & 0xFFFFFFFF

    def fences_broken(self, regions, salt):
        return [sum(int(w) != self.stream(salt, ptr + 4 * i) for i, w in enumerate(self.slots.u32(ptr)[:nbytes // 4]))
                for ptr, nbytes in regions]


def judge(launches: int, outputs=("C",)):
    checks = ChecksDouble()
    device = SimpleNamespace(alloc=lambda nbytes: setattr(checks, "slots", SlotsDouble(nbytes)) or checks.slots)
    arrays = [SimpleNamespace(job=SimpleNamespace(name=n, dtype="float32"), ptr=0, ref=SimpleNamespace(ptr=0),
                              nbytes=64, scale_row=16) for n in outputs]
    bufs = SimpleNamespace(outputs=lambda: arrays, job=SimpleNamespace(rtol={n: 1e-5 for n in outputs}),
                           poison=lambda poisons: None)
    return checks, TimedChecks(device, checks, bufs, poisons=None, repetitions=launches)


def test_honest_records_read_as_before():
    checks, j = judge(3)
    for i, bad in enumerate((0, 5, 0)):
        checks.bad = bad
        j.after(i)
    found = j.verdict(3)
    assert found is not None and found.status == "unstable" and found.mismatches == 5
    assert "1 of 3 timed launches" in found.detail and "launch #2" in found.detail
    checks, j = judge(3)
    for i in range(3):
        j.after(i)
    assert j.verdict(3) is None


def test_a_count_rewritten_after_its_check_is_out_of_bounds():
    checks, j = judge(3, outputs=("C", "D"))
    checks.bad = 7
    for i in range(3):
        j.after(i)
    slot = j.slot_words
    j.slots.words[2 * slot + 6] = 0  # launch 2, output C: a zero count over its 7 mismatches
    found = j.verdict(3)
    assert found is not None and found.status == "out_of_bounds" and "launch #2" in found.detail


def test_a_record_sealed_in_another_run_does_not_pass_in_this_one():
    checks, first = judge(1)
    first.after(0)
    replay = first.slots.words[:first.slot_words].copy()
    checks.bad = 9
    second = TimedChecks(SimpleNamespace(alloc=lambda nbytes: first.slots), checks, first.bufs, None, 1)
    second.after(0)
    second.slots.words[:second.slot_words] = replay  # the same address, the first run's clean record
    found = second.verdict(1)
    assert found is not None and found.status == "out_of_bounds"


def test_a_sealed_slot_keeps_no_data_between_launches():
    """A later launch writing into an earlier launch's sealed slot, anywhere but its count and tag (where a kernel
    could keep data between launches), breaks the keystream the seal left there: out_of_bounds."""
    checks, j = judge(3)
    for i in range(3):
        j.before(i)
        j.after(i)
    assert j.verdict(3) is None
    j.slots.words[1 * j.slot_words + STATS_WORDS + 1] = 12345  # launch 2's per-block count, after its seal
    found = j.verdict(3)
    assert found is not None and found.status == "out_of_bounds" and "launch #2" in found.detail


def test_the_slots_not_sealed_yet_are_zero_before_each_launch():
    """A launch that writes ahead into a later launch's slot finds it zeroed before the next launch."""
    checks, j = judge(3)
    j.before(0)
    j.after(0)
    j.slots.words[2 * j.slot_words + 3] = 777  # launch 1 writes into launch 3's slot
    j.before(1)
    assert j.slots.words[2 * j.slot_words + 3] == 0  # gone before launch 2 could read it
    assert j.slots.words[7] == prf(checks.keys.seal[0] ^ j.salt, checks.keys.seal[1], j.slots.ptr)  # launch 1's seal kept
    j.slots.words[-1] = 777  # and past the last slot, in the page's slack
    j.before(2)
    assert j.slots.words[-1] == 0


def test_every_timed_launch_starts_from_poisoned_outputs_and_scrubbed_shared_and_local_memory():
    """before(i), ahead of each launch: the outputs poisoned, then every SM's shared memory, the kernel's local
    frame and the register files overwritten, the checks' scratch zeroed (the GPU side: tests/test_gpu_adversarial.py's
    shared-memory and local-memory stash tests, tests/test_gpu_register_scrub.py)."""
    checks, j = judge(2)
    order: list[str] = []
    checks.scrub_shared = lambda: order.append("scrub")
    checks.clear_scratch = lambda: order.append("scratch")
    checks.scrub_local = lambda local_bytes: order.append(f"local {local_bytes}")
    checks.scrub_registers = lambda: order.append("registers")
    j.bufs.poison = lambda poisons: order.append("poison")
    j.local_bytes = 96  # the timed kernel's local frame
    for i in range(2):
        j.before(i)
    assert order == ["poison", "scrub", "local 96", "registers", "scratch"] * 2


def test_a_programs_workspace_is_poisoned_with_the_outputs_before_every_timed_launch():
    """A program's timed launches: before(i) poisons its workspace right after the outputs (one fill), then scrubs."""
    checks, j = judge(2)
    order: list[str] = []
    checks.scrub_shared = lambda: order.append("scrub")
    j.bufs.poison = lambda poisons: order.append("poison")
    j.run = SimpleNamespace(init_workspace=lambda poisons: order.append("workspace"))
    for i in range(2):
        j.before(i)
    assert order == ["poison", "workspace", "scrub"] * 2
