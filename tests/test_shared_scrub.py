"""The shared-memory scrub on the CPU: the two launches it enqueues (a device double records
them). The GPU test of both stashes is tests/test_gpu_adversarial.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from warpsmith.agent.worker.gpu_checks import GpuChecks
from warpsmith.agent.worker.pages import ALLOC_GRANULE


@dataclass
class _Facts:
    sm_count: int = 132
    max_blocks_per_sm: int = 32
    max_threads_per_sm: int = 2048
    smem_per_sm: int = 233472


@dataclass
class _Buffer:
    ptr: int
    nbytes: int
    fills: list = field(default_factory=list)

    def fill_u32_async(self, value, offset, nbytes):
        self.fills.append((value, offset, nbytes))


class DeviceDouble:
    """Stands in for the GPU: records launches and allocations."""

    def __init__(self):
        self.facts, self.launches, self.buffers = _Facts(), [], []

    def alloc(self, nbytes):
        self.buffers.append(_Buffer(ALLOC_GRANULE * (len(self.buffers) + 1), nbytes))
        return self.buffers[-1]

    def launch(self, fn, grid, block, smem, args):
        self.launches.append((fn, grid, block, smem, args))


def _checks(device):
    checks = GpuChecks.__new__(GpuChecks)  # the scrub's own state only: no checker module on this machine
    checks.device, checks._arrived = device, None
    checks._fn = {"ws_scrub_shared": "ws_scrub_shared"}
    checks._sms, checks._shared_max = device.facts.sm_count, 232448
    return checks


def test_every_block_slot_of_every_sm_gets_its_reserved_kilobyte_overwritten():
    """One block per SM holds the opt-in maximum; then SMs x the most resident blocks per SM overwrite the
    reserved kilobyte of each block slot (a stash there outlived the one-block scrub on the H200) and their share
    of the SM's shared memory (so together they tile it, and need the largest carveout). Both hold until all their
    blocks arrived, counting into their own words of a page zeroed whole, each zeroed again before its launch."""
    device = DeviceDouble()
    checks = _checks(device)
    checks.scrub_shared()
    (big, grid, block, smem, args), (reserved, rgrid, rblock, rsmem, rargs) = device.launches
    (counter,) = device.buffers
    assert (big, grid, smem) == ("ws_scrub_shared", (132, 1, 1), 232448)
    assert args == [("i64", 232448 // 4), ("ptr", counter.ptr + 8)]
    assert (reserved, rgrid) == ("ws_scrub_shared", (132 * 32, 1, 1))
    assert rblock[0] * 32 <= device.facts.max_threads_per_sm  # all of them resident at once
    assert rsmem == 6144 and 32 * (rsmem + 1024) <= device.facts.smem_per_sm  # 7296 a slot, 6272 past its 1 KB
    assert rargs == [("i64", 6144 // 4), ("ptr", counter.ptr + 16)]
    # each launch's two words zeroed just before it (scrub_shared called on its own holds too)
    assert counter.fills == [(0, 0, counter.nbytes), (0, 8, 8), (0, 16, 8)] and counter.nbytes % ALLOC_GRANULE == 0
