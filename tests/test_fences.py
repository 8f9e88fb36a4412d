"""The fence around a run (agent/worker/fences.py), on the CPU: what is fenced for a
case's run and what a breach reports. A double stands in for the GPU's memory and the
fence kernels (their GPU side: tests/test_gpu_adversarial.py)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from warpsmith.agent.worker.case_buffers import GUARD_WORD
from warpsmith.agent.worker.fences import Fence, regions

MEMORY: dict[int, int] = {}  # device word address -> word
_next_base = itertools.count(1 << 20, 1 << 16)


class BufferDouble:
    """A device buffer: words of MEMORY at its own addresses."""

    def __init__(self, nbytes: int):
        self.ptr, self.nbytes = next(_next_base), nbytes
        self.fill_u32(0, 0, nbytes)

    def fill_u32(self, word: int, offset: int, nbytes: int) -> None:
        for addr in range(self.ptr + offset, self.ptr + offset + nbytes, 4):
            MEMORY[addr] = word

    def word(self, offset: int) -> int:
        return MEMORY[self.ptr + offset]


class FenceChecksDouble:
    """GpuChecks' fence kernels: a word per (salt, address), as the PRF of the address."""

    def fence(self, ptr, nbytes, salt):
        for addr in range(ptr, ptr + nbytes, 4):
            MEMORY[addr] = hash((salt, addr)) & 0xFFFFFFFF

    def fences_broken(self, regions, salt):
        return [sum(MEMORY[addr] != hash((salt, addr)) & 0xFFFFFFFF for addr in range(ptr, ptr + nbytes, 4))
                for ptr, nbytes in regions]


def case(name: str, outputs=("C",), inputs=("A",), nbytes=64, guard=16, constant=None, slack=0):
    """A case's buffers; `constant`: the fill word of its inputs if they are constant (the accumulation probe's);
    `slack`: bytes of every buffer's last page past what it holds."""
    def array(n, role):
        a = SimpleNamespace(job=SimpleNamespace(name=n, role=role), buffer=BufferDouble(nbytes + 2 * guard + slack),
                            nbytes=nbytes, guard=guard, sentinel=GUARD_WORD, constant=None)
        if role == "output":  # its float64 reference
            a.ref, a.ref_device = BufferDouble(2 * nbytes + slack), SimpleNamespace(nbytes=2 * nbytes)
        a.guard_offsets = lambda: (("before", 0), ("after", guard + nbytes))
        a.ptr = a.buffer.ptr + guard
        return a
    arrays = {n: array(n, "input") for n in inputs} | {n: array(n, "output") for n in outputs}
    bufs = SimpleNamespace(job=SimpleNamespace(case=name), moats=[BufferDouble(32), BufferDouble(32)], arrays=arrays,
                           outputs=lambda: [a for a in arrays.values() if a.job.role == "output"],
                           inputs=lambda: [a for a in arrays.values() if a.job.role == "input"])
    bufs.arm_guard = lambda a, offset: a.buffer.fill_u32(a.sentinel, offset, a.guard)
    bufs.restore_constant = lambda a: a.buffer.fill_u32(a.constant, a.guard, a.nbytes)
    for a in bufs.inputs():
        if constant is not None:
            a.constant = constant
            a.buffer.fill_u32(constant, guard, nbytes)
    for a in arrays.values():
        for _, offset in a.guard_offsets():
            bufs.arm_guard(a, offset)
    return bufs


def program(bufs, nbytes=48, guard=16, slack=0):
    w = SimpleNamespace(name="partial", buffer=BufferDouble(nbytes + 2 * guard + slack), nbytes=nbytes, guard=guard)
    return SimpleNamespace(bufs=bufs, workspace={"partial": w})


def test_a_run_fences_the_moats_its_own_guard_bands_and_everything_of_the_other_cases():
    a, b = case("a"), case("b", outputs=("C", "D"))
    pa, pb = program(a), program(b)
    got = {r.what for r in regions(a, pa, [a, b], [pa, pb])}
    assert got == {"case 'a' moat", "case 'a' A (before)", "case 'a' A (after)",
                   "case 'a' C (before)", "case 'a' C (after)",
                   "case 'a' workspace partial (before)", "case 'a' workspace partial (after)",
                   "case 'b' moat", "case 'b' output C", "case 'b' output D", "case 'b' workspace partial",
                   "case 'b' input A (before)", "case 'b' input A (after)"}
    sizes = {r.what: r.nbytes for r in regions(a, pa, [a, b], [pa, pb])}
    assert sizes["case 'b' output C"] == 64 + 2 * 16 and sizes["case 'a' C (after)"] == 16
    # Its own arrays' data and its own workspace's are what it was given: never fenced.
    assert not any(r.ptr == a.arrays["C"].buffer.ptr + 16 for r in regions(a, pa, [a, b], [pa, pb]))


def test_a_16_bit_band_off_a_word_boundary_is_fenced_in_its_whole_words():
    """15 bfloat16: the band after them starts 2 bytes into a word. Its whole words are fenced (the 2 bytes at
    each end are left to the overrun check), the running case's and another case's input bands alike."""
    a, b = case("a", nbytes=30), case("b", nbytes=30)
    by_what = {r.what: r for r in regions(a, None, [a, b], [])}
    for what, arr in (("case 'a' C (after)", a.arrays["C"]), ("case 'b' input A (after)", b.arrays["A"])):
        r = by_what[what]
        band = arr.buffer.ptr + arr.guard + 30
        assert r.ptr == band + 2 and r.ptr % 4 == 0 and r.nbytes == arr.guard - 4


def test_a_write_anywhere_fenced_is_reported_and_the_sentinels_come_back():
    a, b = case("a"), case("b")
    pb = program(b)
    fence = Fence(FenceChecksDouble(), regions(a, None, [a, b], [pb]))
    fence.raise_()
    assert fence.breached() is None
    assert all(m.word(o) == GUARD_WORD for m in a.moats + b.moats for o in range(0, 32, 4))
    assert a.arrays["C"].buffer.word(0) == GUARD_WORD and a.arrays["C"].buffer.word(16 + 64) == GUARD_WORD

    fence = Fence(FenceChecksDouble(), regions(a, None, [a, b], [pb]))
    fence.raise_()
    pb.workspace["partial"].buffer.fill_u32(7, 12, 4)
    a.moats[1].fill_u32(GUARD_WORD, 0, 32)  # the sentinel put back: still a breach
    a.arrays["C"].buffer.fill_u32(GUARD_WORD, 16 + 64, 16)  # a stash in its own band, "restored"
    found = fence.breached()
    assert found is not None and found.status == "out_of_bounds"
    for what in ("case 'b' workspace partial", "case 'a' moat", "case 'a' C (after)"):
        assert what in found.detail
    assert "case 'b' output C" not in found.detail


def test_a_launch_the_runner_refuses_leaves_no_fence_behind():
    a, b = case("a"), case("b")
    fence = Fence(FenceChecksDouble(), regions(a, None, [a, b], []))
    fence.raise_()
    with pytest.raises(RuntimeError), fence.lowered_on_error():
        raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    assert all(m.word(o) == GUARD_WORD for m in a.moats + b.moats for o in range(0, 32, 4))


def test_each_fence_draws_a_fresh_salt():
    a = case("a")
    assert len({Fence(FenceChecksDouble(), regions(a, None, [a], [])).salt for _ in range(8)}) == 8


def test_another_cases_constant_input_is_fenced_then_filled_with_its_value_again():
    """A constant input (the accumulation probe's) would pass its checksum once the constant is written back: it
    is fenced like an output, a write there is a breach, and afterwards it holds its value again; an input with
    varied data is left to its checksum (only its guard bands are fenced)."""
    a, probe, plain = case("a"), case("probe", constant=0x3F800000), case("plain")
    got = {r.what for r in regions(a, None, [a, probe, plain], [])}
    assert "case 'probe' input A (constant)" in got and not any("'plain' input A (constant)" in w for w in got)
    fence = Fence(FenceChecksDouble(), regions(a, None, [a, probe, plain], []))
    fence.raise_()
    x = probe.arrays["A"]
    assert x.buffer.word(x.guard) != 0x3F800000  # fenced: the keystream, not the constant
    x.buffer.fill_u32(0x3F800000, x.guard, 4)  # a kernel "putting the constant back" over a stash
    found = fence.breached()
    assert found is not None and "case 'probe' input A (constant)" in found.detail
    assert all(x.buffer.word(x.guard + 4 * i) == 0x3F800000 for i in range(x.nbytes // 4))


def test_an_input_is_constant_when_every_element_is_one_value():
    """Its fill word in the input's width; -1 for 8-byte elements (re-uploaded instead); None when they differ."""
    import numpy as np

    from warpsmith.agent.worker.case_buffers import _constant_word
    assert _constant_word(np.full((4, 2), 1.0, np.float32), 4) == 0x3F800000
    assert _constant_word(np.full(6, 0x3F80, np.uint16), 2) == 0x3F80  # bfloat16 1.0 as stored
    assert _constant_word(np.full(3, 1.0, np.float64), 4) == -1
    assert _constant_word(np.array([1.0, 2.0], np.float32), 4) is None


def test_the_slack_of_every_buffers_last_page_is_fenced():
    """Past the last guard band of each array, past each reference and each workspace: mapped memory nothing reads,
    the running case's and every other case's alike (another case's outputs and another program's workspace fenced
    whole, slack included); a stash there is a breach."""
    a, b = case("a", slack=32), case("b", slack=32)
    pa, pb = program(a, slack=32), program(b, slack=32)
    rs = regions(a, pa, [a, b], [pa, pb])
    slack = {r.what: r for r in rs if r.what.endswith("(slack)")}
    assert set(slack) == {"case 'a' A (slack)", "case 'a' C (slack)", "case 'a' reference C (slack)",
                          "case 'a' workspace partial (slack)", "case 'b' A (slack)", "case 'b' reference C (slack)"}
    whole = {r.what: r.nbytes for r in rs}
    assert whole["case 'b' output C"] == b.arrays["C"].buffer.nbytes == 64 + 2 * 16 + 32
    assert whole["case 'b' workspace partial"] == pb.workspace["partial"].buffer.nbytes
    c = a.arrays["C"]
    assert (slack["case 'a' C (slack)"].ptr, slack["case 'a' C (slack)"].nbytes) == (c.buffer.ptr + 64 + 2 * 16, 32)
    fence = Fence(FenceChecksDouble(), rs)
    fence.raise_()
    c.ref.fill_u32(7, 2 * 64, 4)  # a stash past its own output's reference
    found = fence.breached()
    assert found is not None and "case 'a' reference C (slack)" in found.detail


def test_buffers_are_allocated_in_whole_pages_and_start_on_one():
    """In whole pages; one the driver placed off a page boundary is refused (the end of its last page would be
    somebody else's memory, which no fence covers)."""
    from warpsmith.agent.worker.pages import ALLOC_GRANULE, alloc_pages
    asked = []

    def alloc(n, at=ALLOC_GRANULE):
        asked.append(n)
        return SimpleNamespace(ptr=at * 7, nbytes=n)
    device = SimpleNamespace(alloc=alloc)
    for n in (1, ALLOC_GRANULE, ALLOC_GRANULE + 4, 0):
        alloc_pages(device, n)
    assert asked == [ALLOC_GRANULE, ALLOC_GRANULE, 2 * ALLOC_GRANULE, ALLOC_GRANULE]
    with pytest.raises(RuntimeError, match="not on a 2 MiB page"):
        alloc_pages(SimpleNamespace(alloc=lambda n: alloc(n, at=ALLOC_GRANULE + 256)), 64)


def test_read_only_inputs_and_references_need_no_fence():
    """Where the driver maps inputs and references read-only for kernels (agent/worker/read_only.py), a store
    there faults: their guard bands, constants and slack drop out of the fence, the rest stays."""
    a, b = case("a", constant=0x3F800000, slack=8), case("b", constant=0x3F800000, slack=8)
    for bufs in (a, b):
        for arr in bufs.arrays.values():
            (arr.buffer if arr.job.role == "input" else arr.ref).read_only = True
    got = {r.what for r in regions(a, None, [a, b], [])}
    assert not any(" A " in w or w.endswith(" A (slack)") or "reference" in w or "input" in w for w in got), got
    assert {"case 'a' C (before)", "case 'a' C (after)", "case 'a' C (slack)", "case 'b' output C"} <= got


def test_the_harness_writes_a_read_only_buffer_only_between_writable_and_its_end():
    from warpsmith.agent.worker.read_only import protect, writable

    class Protectable:
        protectable, read_only, seen = True, False, []

        def upload(self):
            self.seen.append(self.read_only)
    buf = Protectable()
    protect(buf)
    assert buf.read_only
    with writable(buf):
        buf.upload()
    assert buf.seen == [False] and buf.read_only
    with pytest.raises(RuntimeError), writable(buf):
        raise RuntimeError("a failed upload")
    assert buf.read_only  # protected again on the way out
