"""The fence around a run (agent/worker/fences.py), on the CPU: what is fenced for a
case's run and what a breach reports. A double stands in for the GPU's buffers and the
fence kernels (their GPU side: tests/test_gpu_adversarial.py)."""

from __future__ import annotations

from types import SimpleNamespace

from agent.worker.case_buffers import GUARD_WORD
from agent.worker.fences import Fence, regions


class BufferDouble:
    """A device buffer: its words in a list."""

    def __init__(self, nbytes: int):
        self.ptr, self.nbytes = id(self), nbytes
        self.words = [0] * (nbytes // 4)

    def fill_u32(self, word: int, offset: int, nbytes: int) -> None:
        self.words[offset // 4:(offset + nbytes) // 4] = [word] * (nbytes // 4)


class FenceChecksDouble:
    """GpuChecks' fence kernels: a keystream word per (salt, index)."""

    def __init__(self, buffers):
        self.by_ptr = {b.ptr: b for b in buffers}

    def fence(self, ptr, nbytes, salt):
        b = self.by_ptr[ptr]
        b.words[:nbytes // 4] = [hash((salt, i)) & 0xFFFFFFFF for i in range(nbytes // 4)]

    def fence_broken(self, ptr, nbytes, salt):
        b = self.by_ptr[ptr]
        return sum(w != hash((salt, i)) & 0xFFFFFFFF for i, w in enumerate(b.words[:nbytes // 4]))


def case(name: str, outputs=("C",)):
    arrays = [SimpleNamespace(job=SimpleNamespace(name=o), buffer=BufferDouble(64 + 2 * 16), nbytes=64, guard=16)
              for o in outputs]
    return SimpleNamespace(job=SimpleNamespace(case=name), moats=[BufferDouble(32), BufferDouble(32)],
                           outputs=lambda: arrays, arrays={a.job.name: a for a in arrays})


def program(bufs, nbytes=48):
    w = SimpleNamespace(name="partial", buffer=BufferDouble(nbytes + 32), nbytes=nbytes, guard=16)
    return SimpleNamespace(bufs=bufs, workspace={"partial": w})


def all_buffers(*things):
    out = []
    for t in things:
        if hasattr(t, "moats"):
            out += t.moats + [a.buffer for a in t.outputs()]
        else:
            out += [w.buffer for w in t.workspace.values()]
    return out


def test_a_run_fences_its_own_moats_and_everything_of_the_other_cases_but_nothing_it_was_given():
    a, b = case("a"), case("b", outputs=("C", "D"))
    pa, pb = program(a), program(b)
    got = {r.what for r in regions(a, pa, [a, b], [pa, pb])}
    assert got == {"case 'a' moat", "case 'b' moat", "case 'b' output C", "case 'b' output D",
                   "case 'b' workspace partial"}
    whole = {r.buffer: r.nbytes for r in regions(a, pa, [a, b], [pa, pb])}
    assert whole[b.arrays["C"].buffer] == 64 + 2 * 16  # guard bands included


def test_a_write_anywhere_fenced_is_reported_once_and_the_moats_get_their_sentinel_back():
    a, b = case("a"), case("b")
    pb = program(b)
    checks = FenceChecksDouble(all_buffers(a, b, pb))
    fence = Fence(checks, regions(a, None, [a, b], [pb]))
    fence.raise_()
    assert fence.breached() is None
    assert all(w == GUARD_WORD for m in a.moats + b.moats for w in m.words)

    fence = Fence(checks, regions(a, None, [a, b], [pb]))
    fence.raise_()
    pb.workspace["partial"].buffer.words[3] ^= 1
    a.moats[1].fill_u32(GUARD_WORD, 0, 32)  # the sentinel put back: still a breach
    found = fence.breached()
    assert found is not None and found.status == "out_of_bounds"
    assert "case 'b' workspace partial" in found.detail and "case 'a' moat" in found.detail
    assert "case 'b' output C" not in found.detail


def test_each_fence_draws_a_fresh_salt():
    a = case("a")
    salts = {Fence(FenceChecksDouble([]), regions(a, None, [a], [])).salt for _ in range(8)}
    assert len(salts) == 8
