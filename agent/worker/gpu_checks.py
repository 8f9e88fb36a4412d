"""The checks that run on the GPU after every launch: output against the float64
reference (kept masked on the GPU, see SOURCE), guard bands against their sentinel,
inputs and references against the keyed checksums taken when they were uploaded.

They run on the GPU because a 4096 x 4096 comparison in NumPy costs ~200 ms and
the evaluation of a whole candidate has a budget of one second. Only when a check
fails is the output downloaded and the detailed report built on the CPU
(:mod:`warpsmith.agent.worker.mismatch`). The comparison is the one :mod:`warpsmith.agent.spec.tolerance`
defines; a GPU test checks both agree.
"""

from __future__ import annotations

import struct
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..runtime import compiler
from ..spec import tolerance
from ..spec.workload import ARRAY_ITEMSIZE
from .check_keys import CHECKSUM_KEY, FENCE_KEY, REF_KEY, SEAL_KEY, CheckKeys
from .host_prf import prf
from .pages import alloc_pages
from .register_scrub import LAYOUTS, RegisterScrub, hold_name

if TYPE_CHECKING:
    from ..runtime.native import Buffer, Device, Function, KernelArg

# The harness's own CUDA, in cuda/ beside this file: the keyed PRF (prf.cuh; `prf` below is
# its host twin), what the holding scrubs share (hold.cuh), the checker kernels (checks.cu)
# and the local-memory scrub (local_scrub.cu).
CUDA = Path(__file__).with_name("cuda")
PRF_SOURCE = (CUDA / "prf.cuh").read_text()
HOLD_SOURCE = (CUDA / "hold.cuh").read_text()

STATS_WORDS = 8  # a check's stats words; the per-block counts follow them (ws_block_count)

RESERVED_SMEM = 1024  # shared memory the system keeps per block (sm_80 and up)
SOURCE = (PRF_SOURCE + HOLD_SOURCE
          + f"#define WS_STATS_WORDS {STATS_WORDS}\n#define WS_RESERVED_SMEM {RESERVED_SMEM}u\n"
          + tolerance.COMPARISON_CUDA + (CUDA / "checks.cu").read_text())

# Compiled per frame size with -DWS_LOCAL_WORDS (GpuChecks.local_scrub).
LOCAL_SCRUB_SOURCE = HOLD_SOURCE + (CUDA / "local_scrub.cu").read_text()


NO_INDEX = 0xFFFFFFFFFFFFFFFF
# The scrub launches whose blocks hold for each other (GpuChecks._arrival_counter)
HOLDS = ("local scrub", "shared scrub, a block per SM", "shared scrub, a block per slot",
         *(hold_name(threads) for threads in LAYOUTS))
CLOSE_KERNELS = {"float32": "ws_check_close_f32", "float64": "ws_check_close_f64",
                 "float16": "ws_check_close_f16", "bfloat16": "ws_check_close_bf16"}
# By word width in bytes: 4, 2 for 16-bit arrays, 1 for fp8 arrays (agent/worker/case_buffers.py).
COUNT_NOT_KERNELS = {4: "ws_count_not", 2: "ws_count_not16", 1: "ws_count_not8"}
CHECKSUM_KERNELS = {4: "ws_checksum", 2: "ws_checksum16", 1: "ws_checksum8"}
# Those that read the key page (cuda/checks.cu, ws_key_word), and the rest.
KEYED_KERNELS = (*CLOSE_KERNELS.values(), "ws_count_differ_ref", "ws_mask64", "ws_mask32", "ws_fence", "ws_fence_count",
                 "ws_seal", *CHECKSUM_KERNELS.values())
KERNELS = (*KEYED_KERNELS, *COUNT_NOT_KERNELS.values(), "ws_fill16", "ws_fill8", "ws_scrub_shared")


def _signed(value: int) -> int:
    """A u64 as the i64 launch argument with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _as_double(bits: int) -> float:
    """A u64's bits as the float64 with the same bits."""
    return float(struct.unpack("<d", struct.pack("<Q", int(bits)))[0])


@dataclass(frozen=True)
class CloseStats:
    mismatches: int
    max_rel_error: float
    max_abs_error: float
    first_bad: int  # flat index, or -1
    unwritten: int


class GpuChecks:
    """The checker kernels, compiled once per worker, and a small stats buffer."""

    def __init__(self, device: Device, arch: str):
        self.device, self.arch = device, arch
        self._local_scrubs: dict[int, Function] = {}  # frame words -> ws_scrub_local of that frame
        self._arrived: Buffer | None = None  # the holding scrubs' arrival counters (HOLDS, _arrival_counter)
        self._window = 0  # the largest local window scrubbed so far, in bytes
        compiled = compiler.compile_kernel(SOURCE, "", arch, filename="warpsmith_checks.cu")
        if not compiled.ok:
            raise RuntimeError(f"warpsmith's own checker kernels failed to compile:\n{compiled.log}")
        module = device.load_module(compiled.cubin)
        self._module = module
        self._fn = {name: module.function(name) for name in KERNELS}
        self._grid = max(1, device.facts.sm_count) * 4
        self._sms, self._shared_max = max(1, device.facts.sm_count), device.facts.smem_per_block_optin
        # A check's stats: STATS_WORDS, then one mismatch count per block of the check (ws_seal)
        self.slot_words = STATS_WORDS + self._grid
        self._stats = alloc_pages(device, self.slot_words * 8)
        self.keys = CheckKeys(device)
        # fences_broken's counters and a Tally's results: a page each now, grown on demand.
        # Allocated before any case's buffers, as _stats is: a page the driver placed right
        # after a case's buffers would take a kernel's far overrun (4 MiB past its output,
        # tests/test_gpu_adversarial.py) into memory the worker zeroes before reading, where
        # no check sees it, instead of into another case's buffers or unmapped memory.
        self._counts = alloc_pages(device, 8)
        self._slots = alloc_pages(device, 8)
        self._fn["ws_scrub_shared"].prefer_all_shared()
        self._registers = RegisterScrub(device, arch)
        # The scrubs' writes (the reserved shared kilobyte included) tried once now: a GPU or
        # driver that refused them would fail here, said once, not in every evaluation. And
        # whether every block of each holding scrub was resident at once (another context on
        # the GPU, or a carveout smaller than asked, would leave slots unscrubbed): the names
        # of those that were not, in `holds_short` (tests/test_gpu_adversarial.py expects none).
        self.scrub(0)
        device.synchronize()
        counts = np.empty(2 * len(HOLDS), dtype=np.uint32)
        assert self._arrived is not None  # allocated by the scrub
        self._arrived.download(counts)
        self.holds_short: list[str] = [
            f"{name}: {int(counts[2 * k + 1])} of {int(counts[2 * k])} blocks gave up waiting"
            for k, name in enumerate(HOLDS) if counts[2 * k + 1]] + self._registers.short

    def _reset(self) -> None:
        init = np.zeros(STATS_WORDS, dtype=np.uint64)
        init[3] = NO_INDEX
        self._stats.upload(init)

    def _read(self) -> np.ndarray:
        out = np.empty(STATS_WORDS, dtype=np.uint64)
        self._stats.download(out)
        return out

    def enqueue_output_check(self, dtype: str, out_ptr: int, ref_ptr: int, nbytes: int, scale_row: int,
                             rtol: float, stats_ptr: int) -> None:
        """Enqueue the output check without waiting: its mismatch count lands in
        stats_ptr[0] (zeroed by the caller). Floats by tolerance (each `scale_row` elements
        on their scale, stored after the reference's values), integers exactly."""
        with self.keys.on() as keys:
            if dtype in CLOSE_KERNELS:
                name = CLOSE_KERNELS[dtype]
                args = [("ptr", out_ptr), ("ptr", ref_ptr), ("i64", nbytes // ARRAY_ITEMSIZE[dtype]),
                        ("i64", scale_row), ("f64", rtol), ("ptr", keys + REF_KEY), ("ptr", stats_ptr)]
            else:
                name = "ws_count_differ_ref"
                args = [("ptr", out_ptr), ("ptr", ref_ptr), ("i64", nbytes // 4), ("ptr", keys + REF_KEY),
                        ("ptr", stats_ptr)]
            self.device.launch(self._fn[name], (self._grid, 1, 1), (256, 1, 1), 0, args)

    def enqueue_seal(self, stats_ptr: int, salt: int) -> None:
        """Behind an enqueued output check: its count, summed from the blocks' own, and the
        count's tag (ws_seal) into words 6 and 7 of its stats, and the fence's keystream of
        `salt` into every other word (sealed_rest says where, to check after the loop). The
        salt is the timing run's: a tag from another run (the same address reused) does not
        pass in this one."""
        with self.keys.on() as keys:
            self.device.launch(self._fn["ws_seal"], (1, 1, 1), (128, 1, 1), 0,
                               [("ptr", stats_ptr), ("i64", self._grid), ("ptr", keys + SEAL_KEY),
                                ("ptr", keys + FENCE_KEY), ("i64", _signed(salt))])

    def sealed_rest(self, stats_ptr: int) -> list[tuple[int, int]]:
        """The (ptr, nbytes) of a sealed slot that hold the fence's keystream: all but the
        count and its tag (words 6 and 7)."""
        return [(stats_ptr, 6 * 8), (stats_ptr + STATS_WORDS * 8, self._grid * 8)]

    def sealed(self, stats_ptr: int, salt: int, count: int, tag: int) -> bool:
        """Whether (count, tag), read back from the stats at stats_ptr, are what ws_seal wrote there."""
        return prf(self.keys.seal[0] ^ salt, self.keys.seal[1] ^ count, stats_ptr) == tag

    def upload_reference(self, buffer: Buffer, values: np.ndarray) -> None:
        """Upload a reference (float64, or an output's integer dtype) into buffer and mask it
        there: float64 words, or 32-bit words of an integer reference. Synchronous: no
        kernel runs before the mask is on."""
        buffer.upload(values)
        name, width = ("ws_mask64", 8) if values.dtype.kind == "f" else ("ws_mask32", 4)
        with self.keys.on() as keys:
            self.device.launch(self._fn[name], (self._grid, 1, 1), (256, 1, 1), 0,
                               [("ptr", buffer.ptr), ("i64", values.nbytes // width), ("ptr", keys + REF_KEY)])
        self.device.synchronize()

    def close(self, dtype: str, out_ptr: int, ref_ptr: int, n: int, scale_row: int, rtol: float) -> CloseStats:
        """An output of `n` elements against its masked reference: a float output against the
        float64 reference and scales (warpsmith.agent.spec.tolerance's comparison), an integer
        one word for word (its mismatches only)."""
        self._reset()
        self.enqueue_output_check(dtype, out_ptr, ref_ptr, n * ARRAY_ITEMSIZE[dtype], scale_row, rtol, self._stats.ptr)
        self.device.synchronize()
        s = self._read()
        if dtype not in CLOSE_KERNELS:
            return CloseStats(int(s[0]), 0.0, 0.0, -1, 0)
        return CloseStats(int(s[0]), _as_double(s[1]), _as_double(s[2]),
                          -1 if int(s[3]) == NO_INDEX else int(s[3]), int(s[4]))

    def checksum(self, ptr: int, nbytes: int, width: int = 4) -> int:
        """Keyed sum of the `width`-byte words (4, 2 for 16-bit arrays, 1 for fp8) at ptr; equal
        sums mean unchanged contents."""
        tally = self.tally()
        k = tally.checksum(ptr, nbytes, width)
        return tally.read()[k]

    def fence(self, ptr: int, nbytes: int, salt: int) -> None:
        """Fill the 4-byte words at ptr with the keystream of (key, salt); enqueued only."""
        with self.keys.on() as keys:
            self.device.launch(self._fn["ws_fence"], (self._grid, 1, 1), (256, 1, 1), 0,
                               [("ptr", ptr), ("i64", nbytes // 4), ("ptr", keys + FENCE_KEY), ("i64", _signed(salt))])

    def fences_broken(self, regions: list[tuple[int, int]], salt: int) -> list[int]:
        """For each (ptr, nbytes): how many words no longer hold the stream fence() wrote
        there. One wait for all of them (a run fences dozens of regions)."""
        if not regions:
            return []
        if self._counts is None or self._counts.nbytes < 8 * len(regions):
            self._counts = alloc_pages(self.device, 8 * len(regions))
        self._counts.fill_u32(0, 0, 8 * len(regions))
        with self.keys.on() as keys:
            for k, (ptr, nbytes) in enumerate(regions):
                self.device.launch(self._fn["ws_fence_count"], (self._grid, 1, 1), (256, 1, 1), 0,
                                   [("ptr", ptr), ("i64", nbytes // 4), ("ptr", keys + FENCE_KEY),
                                    ("i64", _signed(salt)), ("ptr", self._counts.ptr + 8 * k)])
        self.device.synchronize()
        out = np.empty(len(regions), dtype=np.uint64)
        self._counts.download(out)
        return [int(v) for v in out]

    def count_not(self, ptr: int, value: int, nbytes: int, width: int = 4) -> int:
        """How many `width`-byte words at ptr differ from `value`."""
        tally = self.tally()
        k = tally.count_not(ptr, value, nbytes, width)
        return tally.read()[k]

    def tally(self) -> "Tally":
        """Counts and checksums to enqueue together and read with one wait."""
        return Tally(self)

    def tally_slots(self, n: int) -> Buffer:
        """n zeroed u64 slots for a Tally (the page zeroed whole: no slack to keep data in); enqueued."""
        if self._slots is None or self._slots.nbytes < 8 * n:
            self._slots = alloc_pages(self.device, 8 * n)
        self._slots.fill_u32_async(0, 0, self._slots.nbytes)
        return self._slots

    def local_scrub(self, local_bytes: int) -> Function:
        """The ws_scrub_local whose frame covers a thread's whole local window: the larger of
        the kernel's frame (`local_bytes`) and the context's stack (a kernel can index past
        its own frame; a frameless kernel's access faulted on the H200, but that is the
        hardware's bound, not ours), in whole 256-byte steps. Compiled and loaded on first
        use, before a run starts, so no compile lands inside a timing loop."""
        # The stack as it is now (the driver raises it for a kernel that needs more and never
        # lowers it: a window read at start would go stale), and never less than before.
        self._window = max(self._window, local_bytes, self.device.stack_limit(), 1)
        words = (self._window + 255) // 256 * 64
        if words not in self._local_scrubs:
            compiled = compiler.compile_kernel(LOCAL_SCRUB_SOURCE, "ws_scrub_local", self.arch,
                                               [f"-DWS_LOCAL_WORDS={words}"], filename="warpsmith_scrub_local.cu")
            if not compiled.ok:
                raise RuntimeError(f"warpsmith's local-memory scrub failed to compile:\n{compiled.log}")
            fn = self.device.load_module(compiled.cubin).function(compiled.symbol)
            if fn.info.local_bytes < 4 * words:
                raise RuntimeError(f"warpsmith's local-memory scrub has a {fn.info.local_bytes}-byte frame where "
                                   f"{4 * words} bytes must be overwritten: this ptxas kept it out of local memory")
            self._local_scrubs[words] = fn
        return self._local_scrubs[words]

    def scrub(self, local_bytes: int) -> None:
        """Before a judged or timed launch of a kernel whose frame is `local_bytes`: every
        SM's shared memory, every thread slot's local window and every SM's registers
        overwritten (enqueued only), so nothing a launch left on chip or in its stack reaches
        this one, and nothing of the checks' keys either. The registers last: the other
        scrubs hold nothing secret, but they leave registers behind too."""
        self._zero_arrivals()
        self.scrub_shared()
        self.scrub_local(local_bytes)
        self.scrub_registers()

    def scrub_registers(self) -> None:
        """Overwrite every SM's register file (agent/worker/register_scrub.py); enqueued only."""
        self._registers.launch(self._arrival_counter)

    def scrub_local(self, local_bytes: int) -> None:
        """Overwrite every thread slot's local window (enqueued only) before a launch of a
        kernel whose frame is `local_bytes`: two resident blocks of 1024 threads per SM."""
        fn = self.local_scrub(local_bytes)
        per_sm = max(1, self.device.facts.max_threads_per_sm // 1024)
        self.device.launch(fn, (self._sms * per_sm, 1, 1), (1024, 1, 1), 0,
                           [("ptr", self._arrival_counter("local scrub")), ("i32", 0)])

    def _zero_arrivals(self) -> None:
        """The holding scrubs' arrival counters zeroed (the page whole, so its slack holds
        nothing either); enqueued, before the scrubs that count into them."""
        if self._arrived is None:
            self._arrived = alloc_pages(self.device, 8 * len(HOLDS))
        self._arrived.fill_u32_async(0, 0, self._arrived.nbytes)

    def _arrival_counter(self, scrub: str) -> int:
        """The two words (arrived, gave up) of a holding scrub (HOLDS), zeroed now (enqueued):
        a scrub launched on its own (benchmarks/worker_costs.py) must hold too, not find
        its count already full. scrub() zeroes the whole page besides."""
        if self._arrived is None:
            self._zero_arrivals()
        assert self._arrived is not None  # allocated just now
        offset = 8 * HOLDS.index(scrub)
        self._arrived.fill_u32_async(0, offset, 8)
        return self._arrived.ptr + offset

    def clear_scratch(self) -> None:
        """Zero this object's own small buffers whole, pages and all (the stats of the
        synchronous checks, the fences' counters, the tallies' results); enqueued only.
        Nothing reads them inside a timing loop, so a launch could otherwise keep data
        there for the next."""
        self._stats.fill_u32_async(0, 0, self._stats.nbytes)
        for scratch in (self._counts, self._slots):
            if scratch is not None:
                scratch.fill_u32_async(0, 0, scratch.nbytes)

    def scrub_shared(self) -> None:
        """Overwrite the shared memory of every SM and the reserved kilobyte of every resident
        block slot (ws_scrub_shared, launched twice); enqueued only. Nothing a launch leaves
        there reaches the next one: not the last candidate's, not its own."""
        fn = self._fn["ws_scrub_shared"]
        if self._shared_max:
            self.device.launch(fn, (self._sms, 1, 1), (1024, 1, 1), self._shared_max,
                               [("i64", self._shared_max // 4), ("ptr", self._arrival_counter(HOLDS[1]))])
        per_sm = max(1, self.device.facts.max_blocks_per_sm)
        share = max(0, self.device.facts.smem_per_sm // per_sm - RESERVED_SMEM) // 1024 * 1024
        self.device.launch(fn, (self._sms * per_sm, 1, 1), (32, 1, 1), share,
                           [("i64", share // 4), ("ptr", self._arrival_counter(HOLDS[2]))])

    def fill16(self, ptr: int, value: int, nbytes: int, synchronous: bool = False) -> None:
        """Fill 2-byte words at a 2-byte aligned ptr; enqueued only, unless `synchronous`."""
        self.device.launch(self._fn["ws_fill16"], (self._grid, 1, 1), (256, 1, 1), 0,
                           [("ptr", ptr), ("i32", value), ("i64", nbytes // 2)])
        if synchronous:
            self.device.synchronize()

    def fill8(self, ptr: int, value: int, nbytes: int, synchronous: bool = False) -> None:
        """Fill bytes at any ptr; enqueued only, unless `synchronous`."""
        self.device.launch(self._fn["ws_fill8"], (self._grid, 1, 1), (256, 1, 1), 0,
                           [("ptr", ptr), ("i32", value), ("i64", nbytes)])
        if synchronous:
            self.device.synchronize()


class Tally:
    """Counts (words not holding a value) and keyed checksums, enqueued one after another
    (the checksums' key after their other arguments) and read with one wait. The sweep
    after every request checks each resident case's moats, inputs and references: about
    36 buffers for sgemm, 23.6 ms on the H200 when each check waited for its own result."""

    def __init__(self, checks: GpuChecks):
        self._checks = checks
        self._ops: list[tuple[str, list[KernelArg]]] = []  # (kernel, its arguments but the result slot)

    def count_not(self, ptr: int, value: int, nbytes: int, width: int = 4) -> int:
        """How many `width`-byte words at ptr differ from `value`: the index of its result."""
        self._ops.append((COUNT_NOT_KERNELS[width],
                          [("ptr", ptr), ("i32", value - (1 << 32) if value >= 1 << 31 else value),
                           ("i64", nbytes // width)]))
        return len(self._ops) - 1

    def checksum(self, ptr: int, nbytes: int, width: int = 4) -> int:
        """Keyed sum of the `width`-byte words at ptr: the index of its result."""
        self._ops.append((CHECKSUM_KERNELS[width],
                          [("ptr", ptr), ("i64", nbytes // width)]))
        return len(self._ops) - 1

    def read(self) -> list[int]:
        """Every result, in the order enqueued, after one wait (a wait even with none: what
        ran before surfaces its error here, as the checks' callers expect)."""
        c = self._checks
        if not self._ops:
            c.device.synchronize()
            return []
        slots = c.tally_slots(len(self._ops))
        keyed = [name in CHECKSUM_KERNELS.values() for name, _ in self._ops]
        # The key page is filled only for a tally that holds a checksum: a sweep of counts alone
        # (moats, guard bands) costs no copy and no memset.
        with c.keys.on() if any(keyed) else nullcontext(0) as keys:
            for k, ((name, args), needs_key) in enumerate(zip(self._ops, keyed)):
                key = [("ptr", keys + CHECKSUM_KEY)] if needs_key else []
                c.device.launch(c._fn[name], (c._grid, 1, 1), (256, 1, 1), 0, [*args, *key, ("ptr", slots.ptr + 8 * k)])
        c.device.synchronize()
        out = np.empty(len(self._ops), dtype=np.uint64)
        slots.download(out)
        return [int(v) for v in out]

