"""The checks' keys stay out of every register a later kernel can read unset and out of every
launch's arguments, on the CPU.

- Machine code (real NVRTC and nvdisasm): uniform registers are not scrubbed (ptxas writes
  none a kernel did not ask for), so no checker kernel that reads a key may move a value
  into one from a vector register (R2UR): the keys reach the checker kernels only through
  the key page, loaded per thread (cuda/checks.cu, ws_key_word). A control with the lane
  id left out of the key's address shows ptxas would move them otherwise.
- Host side (a double for the GPU): no launch argument holds a key word, and the key page
  holds zeros whenever no check's kernels are enqueued.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.runtime.sass import disassemble, nvdisasm
from warpsmith.agent.runtime.sass_listing import parse_listing
from warpsmith.agent.worker.check_keys import PAGE_WORDS, CheckKeys
from warpsmith.agent.worker.gpu_checks import KERNELS, KEYED_KERNELS, SOURCE, GpuChecks

ARCHS = ["sm_80", "sm_90", "sm_100"]
LANE_TERM = "(lane & (unsigned)((u64)key >> 63))"


def _moves_to_uniform(source: str, arch: str) -> dict[str, list[str]]:
    """For each checker kernel that reads a key: its R2UR instructions, as nvdisasm spells them."""
    compiled = compile_kernel(source, "", arch, filename="warpsmith_checks.cu")
    assert compiled.ok, compiled.log
    functions = {f.section.removeprefix(".text."): f for f in parse_listing(disassemble(compiled.cubin)) if f.entry}
    assert set(KEYED_KERNELS) <= set(functions)
    return {name: [ins.text() for ins in functions[name].instructions if ins.base == "R2UR"] for name in KEYED_KERNELS}


@pytest.mark.skipif(nvdisasm() is None, reason="nvdisasm (the nvidia-cuda-nvdisasm wheel) not installed")
@pytest.mark.parametrize("arch", ARCHS)
def test_no_keyed_checker_kernel_moves_a_value_into_a_uniform_register(arch):
    assert {name: moves for name, moves in _moves_to_uniform(SOURCE, arch).items() if moves} == {}


@pytest.mark.skipif(nvdisasm() is None, reason="nvdisasm (the nvidia-cuda-nvdisasm wheel) not installed")
def test_a_key_loaded_from_a_uniform_address_would_reach_uniform_registers():
    assert SOURCE.count(LANE_TERM) == 1
    moved = _moves_to_uniform(SOURCE.replace(LANE_TERM, "0"), "sm_90")
    assert moved["ws_fence"] and moved["ws_mask64"]


_addresses = itertools.count(0x7F0000000000, 1 << 21)  # whole 2 MiB pages, as alloc_pages wants


class PageDouble:
    """A device buffer of u64 words; the checks' fills and uploads land in it."""

    def __init__(self, nbytes: int):
        self.ptr, self.nbytes = next(_addresses), nbytes
        self.words = np.zeros(max(1, nbytes // 8), dtype=np.uint64)

    def fill_u32(self, value, offset, nbytes):
        self.words.view(np.uint32)[offset // 4:(offset + nbytes) // 4] = value

    fill_u32_async = fill_u32

    def upload(self, src, offset=0):
        self.words.view(np.uint8)[offset:offset + src.nbytes] = np.frombuffer(src.tobytes(), dtype=np.uint8)

    upload_async = upload

    def download(self, dst, offset=0):
        dst.reshape(-1)[:] = self.words[offset // 8:offset // 8 + dst.size]


class DeviceDouble:
    """Records every launch with the key page's words at that moment."""

    def __init__(self):
        self.facts = SimpleNamespace(sm_count=2)
        self.pages: list[PageDouble] = []
        self.launches: list[tuple[str, list[tuple[str, object]]]] = []
        self.page_during: list[np.ndarray] = []

    def alloc(self, nbytes):
        self.pages.append(PageDouble(nbytes))
        return self.pages[-1]

    def launch(self, fn, grid, block, smem, args):
        self.launches.append((fn, list(args)))
        self.page_during.append(self.pages[0].words.copy())

    def synchronize(self):
        pass


def _checks() -> tuple[GpuChecks, DeviceDouble]:
    device = DeviceDouble()
    checks = GpuChecks.__new__(GpuChecks)  # the host side only: no checker module on this machine
    checks.device, checks._grid, checks._counts, checks._slots = device, 8, None, None
    checks.keys = CheckKeys(device)  # its page the first: the one DeviceDouble watches
    checks._stats = device.alloc(256)
    checks._fn = {name: name for name in KERNELS}
    return checks, device


def test_no_launch_argument_holds_a_key_and_the_page_is_zero_between_checks():
    checks, device = _checks()
    salt = 0x5A5A
    reference = device.alloc(128)
    checks.upload_reference(reference, np.arange(16, dtype=np.float64))
    checks.close("float32", 0x1000, reference.ptr, 16, 16, 1e-5)
    checks.close("int32", 0x1000, reference.ptr, 16, 16, 0.0)
    checks.fence(0x2000, 64, salt)
    checks.enqueue_output_check("bfloat16", 0x3000, reference.ptr, 32, 16, 0.01, checks._stats.ptr)
    checks.enqueue_seal(checks._stats.ptr, salt)
    checks.fences_broken([(0x2000, 64)], salt)
    assert checks.checksum(0x4000, 64) == 0
    assert not checks.keys.page.words.any()
    keys = [*checks.keys.ref, *checks.keys.fence, *checks.keys.seal, checks.keys.checksum]
    secret = set(keys) | {k ^ salt for k in keys}
    launched = {name for name, _ in device.launches}
    assert {"ws_mask64", "ws_check_close_f32", "ws_count_differ_ref", "ws_check_close_bf16", "ws_seal",
            "ws_fence", "ws_fence_count", "ws_checksum"} <= launched
    for (name, args), page in zip(device.launches, device.page_during, strict=True):
        assert not secret & {int(v) % (1 << 64) for kind, v in args if kind == "i64"}, name
        pointers = [int(v) for kind, v in args if kind == "ptr"]
        offsets = [p - checks.keys.page.ptr for p in pointers if 0 <= p - checks.keys.page.ptr < 8 * PAGE_WORDS]
        if name in KEYED_KERNELS:
            assert offsets, f"{name} launched without the key page"
            assert list(page[:PAGE_WORDS]) == list(checks.keys.words()), f"{name} launched before its keys were in the page"


def test_a_timed_launchs_checks_share_one_fill_and_the_page_is_zeroed_after_the_outermost():
    checks, device = _checks()
    uploads: list[int] = []
    page = checks.keys.page
    page.upload_async = lambda src, offset=0: (uploads.append(1), PageDouble.upload(page, src, offset))
    with checks.keys.on():
        checks.enqueue_output_check("float32", 0x1000, 0x2000, 64, 16, 1e-5, checks._stats.ptr)
        checks.enqueue_seal(checks._stats.ptr, 3)
        assert page.words.any()
    assert uploads == [1] and not page.words.any()


def test_a_tally_of_counts_alone_leaves_the_key_page_untouched():
    checks, device = _checks()
    uploads: list[int] = []
    page = checks.keys.page
    page.upload_async = lambda src, offset=0: (uploads.append(1), PageDouble.upload(page, src, offset))
    tally = checks.tally()
    tally.count_not(0x1000, 7, 64)
    tally.read()
    assert uploads == [] and [name for name, _ in device.launches] == ["ws_count_not"]
    tally = checks.tally()
    tally.count_not(0x1000, 7, 64)
    tally.checksum(0x2000, 64)
    tally.read()
    assert uploads == [1] and not page.words.any()
