"""One case's data on the GPU, kept for the whole session: every array between two
guard bands, and the reference on the device.

Layout of each array buffer: ``[guard | data | guard]``. Guards hold a sentinel
word; a write outside ``data`` changes them. Outputs are poisoned before every
launch with a word from :class:`warpsmith.agent.worker.poison.Poisons`, so an unwritten element
fails. 16-bit arrays are guarded, poisoned and checksummed 2 bytes at a time:
their data may end mid-word (15 elements are 30 bytes), where cuMemsetD32 cannot
start, so they get a 16-bit sentinel and the GPU checks' 16-bit fill kernel; fp8 and
bool arrays (inputs only) likewise a byte at a time.
Inputs and references are checked against keyed checksums taken right after
their upload, before any candidate ran: a kernel that writes into them,
however far from its own buffers, is caught and the data restored from the host.
Where the driver can, inputs and references are also read-only for kernels from
their upload on (agent/worker/read_only.py): a store into them faults.
The references are kept masked by a keyed stream (agent/worker/gpu_checks.py): a
kernel that finds one by pointer arithmetic reads noise. They are allocated first,
then a moat, then the arrays a kernel is given, then another moat, so an overrun
far past an output's guard band lands in a moat (checked like a guard band) or in
unmapped memory (a fault), not in a reference. Allocation order is what the driver usually follows, not a promise:
the checksums are what catch a write that lands elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

from ..spec import tolerance
from ..spec.half_float import STORAGE
from ..spec.inputs import ArrayJob, generate_input
from ..spec.references import load_reference
from ..spec.workload import ARRAY_ITEMSIZE
from .pages import alloc_pages
from .poison import POISON_WIDTH, Poisons
from .protocol import CaseJob
from .read_only import is_read_only, protect, writable

if TYPE_CHECKING:
    from ..runtime.native import Buffer, Device, KernelArg
    from .gpu_checks import GpuChecks, Tally

GUARD_WORD = 0xDEADBEEF
GUARD_HALF = 0xFFAD  # a NaN as float16 and as bfloat16, and neither format's usual NaN (0x7FFF, 0x7E00, 0x7FC0)
GUARD_BYTE = 0xAD  # fp8 and bool guards: -0.40625 in e4m3fn; neither zero nor a NaN (0x7F, 0xFF), what stray stores hold
MOAT_BYTES = 8 << 20  # sentinel-filled memory around the arrays: a far overrun lands there or faults


@dataclass(frozen=True)
class Integrity:
    """What one read of a case's integrity checks found (CaseBuffers.enqueue_integrity)."""
    overruns: tuple[str, ...] = ()  # "name (side)" of each guard band not holding its sentinel
    moat: bool = False  # a moat written: megabytes from any buffer
    inputs: tuple[str, ...] = ()  # inputs whose checksum changed (marked for restoring)
    references: tuple[str, ...] = ()  # references likewise


def guard_bytes(nbytes: int) -> int:
    """Wide enough to catch a tile's overrun, 256-aligned so data keeps its alignment."""
    g = max(4096, min(nbytes, 1 << 20))
    return (g + 255) // 256 * 256


@dataclass
class DeviceArray:
    job: ArrayJob
    buffer: Buffer
    guard: int
    host: np.ndarray | None = None  # inputs: the values uploaded
    checksum: int = 0  # inputs: of the data as uploaded
    ref: Buffer | None = None  # outputs: reference on the device
    ref_host: np.ndarray | None = None
    ref_device: np.ndarray | None = None  # the reference as uploaded (float64 or the output's integer dtype)
    ref_checksum: int = 0
    # Elements per tolerance scale (agent/spec/tolerance.py, row_length): the float
    # reference's device copy holds its values, then one scale per `scale_row` of them.
    scale_row: int = 1
    dirty: bool = False  # an input a kernel modified: re-upload before the next launch
    poison_word: int | None = None  # outputs: the word of the last fill, to tell unwritten elements in a report
    # inputs whose every element is one value (the accumulation probe's): that value's bits,
    # as a fill word of `width` bytes, or -1 if it has none (8-byte elements: uploaded again)
    constant: int | None = None

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + self.guard

    @property
    def nbytes(self) -> int:
        return self.job.nbytes

    @property
    def width(self) -> int:
        """Bytes per guard, poison and checksum word: 2 for 16-bit floats, 1 for fp8 and bool, else 4."""
        return 1 if ARRAY_ITEMSIZE[self.job.dtype] == 1 else POISON_WIDTH.get(self.job.dtype, 4)

    @property
    def sentinel(self) -> int:
        return {1: GUARD_BYTE, 2: GUARD_HALF}.get(self.width, GUARD_WORD)

    def guard_offsets(self) -> tuple[tuple[str, int], ...]:
        return ("before", 0), ("after", self.guard + self.nbytes)


class CaseBuffers:
    def __init__(self, device: Device, job: CaseJob, seed: int, checks: GpuChecks, on_device: bool = True):
        """`on_device`: the references uploaded into this context; without, they exist here
        only on the host, for the judge process and the mismatch reports."""
        self.job, self.checks = job, checks
        self.arrays: dict[str, DeviceArray] = {}
        refs = load_reference(Path(job.reference))
        # output name -> (reference as computed, as uploaded, its device buffer if on_device)
        device_refs: dict[str, tuple[np.ndarray, np.ndarray, Optional[Buffer]]] = {}
        for a in job.arrays:  # references first, then a moat, then what kernels are given
            if a.role == "output":
                ref = refs[a.name]
                uploaded = np.ascontiguousarray(ref.astype(a.dtype) if ref.dtype.kind != "f" else np.concatenate(
                    [ref.ravel(), tolerance.scales(ref.reshape(a.shape), job.per_row_scale)]))
                buf = alloc_pages(device, uploaded.nbytes, protectable=True) if on_device else None
                if buf is not None:
                    checks.upload_reference(buf, uploaded)
                device_refs[a.name] = (ref, uploaded, buf)
        self.moats = [alloc_pages(device, MOAT_BYTES)]
        for a in job.arrays:
            g = guard_bytes(a.nbytes)
            buf = alloc_pages(device, a.nbytes + 2 * g, protectable=a.role == "input")
            arr = DeviceArray(a, buf, g)
            if a.role == "input":
                arr.host = generate_input(a, job.case, seed)
                buf.upload(arr.host, g)
                self.arm_guards(arr)  # armed now: read-only from here on
                arr.checksum = checks.checksum(arr.ptr, a.nbytes, arr.width)
                arr.constant = _constant_word(arr.host, arr.width)
            else:
                arr.ref_host, arr.ref_device, arr.ref = device_refs[a.name]
                if arr.ref is not None:
                    arr.ref_checksum = checks.checksum(arr.ref.ptr, arr.ref_device.nbytes)
                arr.scale_row = tolerance.row_length(tuple(a.shape), job.per_row_scale)
            self.arrays[a.name] = arr
        self.moats.append(alloc_pages(device, MOAT_BYTES))
        for moat in self.moats:
            moat.fill_u32(GUARD_WORD, 0, MOAT_BYTES)
        for arr in self.arrays.values():
            protected = arr.buffer if arr.job.role == "input" else arr.ref
            if protected is not None:  # an output's reference, where uploaded above
                protect(protected)

    def outputs(self) -> list[DeviceArray]:
        return [a for a in self.arrays.values() if a.job.role == "output"]

    def inputs(self) -> list[DeviceArray]:
        return [a for a in self.arrays.values() if a.job.role == "input"]

    def prepare(self, poisons: Poisons) -> None:
        """Re-arm the guards, restore modified inputs and poison every output."""
        for a in self.arrays.values():
            # Always re-armed: the last candidate may have written into them (not into a
            # read-only input's: armed at its upload).
            if not is_read_only(a.buffer):
                self.arm_guards(a)
        self.restore()
        self.poison(poisons, synchronous=True)

    def arm_guards(self, a: DeviceArray) -> None:
        """Both of a's guard bands back to their sentinel."""
        for _, offset in a.guard_offsets():
            self.arm_guard(a, offset)

    def arm_guard(self, a: DeviceArray, offset: int) -> None:
        """One of a's guard bands back to its sentinel."""
        self._fill(a, a.sentinel, offset, a.guard, synchronous=True)

    def poison(self, poisons: Poisons, synchronous: bool = False) -> None:
        """Fill every output with this fill's poison word; asynchronous inside timing loops."""
        poisons.next_fill()
        for a in self.outputs():
            a.poison_word = poisons.word(a.job.dtype)
            self._fill(a, a.poison_word, a.guard, a.nbytes, synchronous)

    def _fill(self, a: DeviceArray, word: int, offset: int, nbytes: int, synchronous: bool) -> None:
        """`nbytes` at `offset` in a's buffer, in a's word width; async fills are only enqueued."""
        if a.width == 2:
            self.checks.fill16(a.buffer.ptr + offset, word, nbytes, synchronous)
        elif a.width == 1:
            self.checks.fill8(a.buffer.ptr + offset, word, nbytes, synchronous)
        else:
            (a.buffer.fill_u32 if synchronous else a.buffer.fill_u32_async)(word, offset, nbytes)

    def enqueue_integrity(self, tally: Tally, guards: bool = True) -> Callable[[Sequence[int]], Integrity]:
        """This case's checks of what a kernel must leave alone, enqueued on `tally` (a
        GpuChecks.tally, read with one wait): its guard bands (unless not `guards`), its
        moats, its inputs' and references' checksums. The function returned reads the
        tally's results and marks what was modified for restoring."""
        bands = [(f"{a.job.name} ({side})", tally.count_not(a.buffer.ptr + offset, a.sentinel, a.guard, a.width))
                 for a in self.arrays.values() for side, offset in a.guard_offsets()] if guards else []
        moats = [tally.count_not(m.ptr, GUARD_WORD, m.nbytes) for m in self.moats]
        inputs = [(a, tally.checksum(a.ptr, a.nbytes, a.width), a.checksum) for a in self.inputs()]
        refs = []
        for a in self.outputs():
            if a.ref is not None and a.ref_device is not None:  # a reference in this context
                refs.append((a, tally.checksum(a.ref.ptr, a.ref_device.nbytes), a.ref_checksum))

        def read(results: Sequence[int]) -> Integrity:
            changed = {id(a) for a, k, want in inputs + refs if results[k] != want}
            for a in self.arrays.values():
                a.dirty = a.dirty or id(a) in changed
            return Integrity(tuple(name for name, k in bands if results[k]), any(results[k] for k in moats),
                             tuple(a.job.name for a, _, _ in inputs if id(a) in changed),
                             tuple(a.job.name for a, _, _ in refs if id(a) in changed))
        return read

    def rearm_moats(self) -> None:
        for m in self.moats:
            m.fill_u32(GUARD_WORD, 0, m.nbytes)

    def restore_constant(self, a: DeviceArray) -> None:
        """A constant input back to its value after a fence, before the sweep reads its
        checksum: one fill, or for 8-byte values an upload."""
        with writable(a.buffer):
            if a.constant is not None and a.constant >= 0:
                self._fill(a, a.constant, a.guard, a.nbytes, synchronous=True)
            elif a.host is not None:
                a.buffer.upload(a.host, a.guard)

    def restore(self) -> None:
        """Upload again whatever a kernel changed (inputs, references)."""
        for a in self.arrays.values():
            if a.dirty:
                if a.job.role == "input":
                    assert a.host is not None  # set for every input
                    with writable(a.buffer):
                        a.buffer.upload(a.host, a.guard)
                        self.arm_guards(a)
                elif a.ref is not None and a.ref_device is not None:
                    with writable(a.ref):
                        self.checks.upload_reference(a.ref, a.ref_device)
                a.dirty = False

    def kernel_args(self) -> list[KernelArg]:
        args: list[KernelArg] = []
        for arg in self.job.args:
            args.append(("ptr", self.arrays[arg.array].ptr) if arg.array else (arg.kind, arg.value))
        return args

    def download(self, name: str) -> np.ndarray:
        a = self.arrays[name]
        out = np.empty(a.job.shape, dtype=STORAGE.get(a.job.dtype, a.job.dtype))  # bfloat16 as its uint16 bits
        a.buffer.download(out, a.guard)
        return out


def _constant_word(host: np.ndarray, width: int) -> int | None:
    """The fill word of an input whose elements are all one value (None if they differ; -1
    when the elements are wider than a fill word)."""
    if host.size == 0 or not (host.reshape(-1)[:1] == host.reshape(-1)).all():
        return None
    if host.dtype.itemsize != width:
        return -1
    return int(host.reshape(-1)[:1].view({1: np.uint8, 2: np.uint16}.get(width, np.uint32))[0])
