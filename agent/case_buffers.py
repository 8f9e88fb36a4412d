"""One case's data on the GPU, kept for the whole session: every array between two
guard bands, pristine copies of the inputs, and the reference on the device.

Layout of each array buffer: ``[guard | data | guard]``. Guards hold a sentinel
word; a write outside ``data`` changes them. Outputs are poisoned with NaN
(0xFFFFFFFF) before every launch so an unwritten element fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .inputs import ArrayJob, generate_input, load_reference
from .worker_protocol import CaseJob

GUARD_WORD = 0xDEADBEEF
POISON_WORD = 0xFFFFFFFF  # NaN as float32 and as float64


def guard_bytes(nbytes: int) -> int:
    """Wide enough to catch a tile's overrun, 256-aligned so data keeps its alignment."""
    g = max(4096, min(nbytes, 1 << 20))
    return (g + 255) // 256 * 256


@dataclass
class DeviceArray:
    job: ArrayJob
    buffer: object  # _runner.Buffer
    guard: int
    host: np.ndarray | None = None  # inputs: the values uploaded
    pristine: object | None = None  # inputs: an untouched device copy
    ref: object | None = None  # outputs: reference on the device
    ref_host: np.ndarray | None = None
    ref_scale: float = 0.0
    dirty: bool = False  # an input a kernel modified: re-upload before the next launch

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + self.guard

    @property
    def nbytes(self) -> int:
        return self.job.nbytes


class CaseBuffers:
    def __init__(self, device, job: CaseJob, seed: int):
        self.job = job
        self.arrays: dict[str, DeviceArray] = {}
        refs = load_reference(job.reference)
        for a in job.arrays:
            g = guard_bytes(a.nbytes)
            buf = device.alloc(a.nbytes + 2 * g)
            arr = DeviceArray(a, buf, g)
            if a.role == "input":
                arr.host = generate_input(a, job.case, seed)
                buf.upload(arr.host, g)
                arr.pristine = device.alloc(a.nbytes)
                arr.pristine.upload(arr.host, 0)
            else:
                ref = refs[a.name]
                arr.ref_host = ref
                device_ref = ref if ref.dtype.kind == "f" else ref.astype(a.dtype)
                arr.ref = device.alloc(device_ref.nbytes)
                arr.ref.upload(np.ascontiguousarray(device_ref))
                arr.ref_scale = float(np.sqrt(np.mean(np.square(ref, dtype=np.float64)))) if ref.dtype.kind == "f" else 0.0
            self.arrays[a.name] = arr

    def outputs(self) -> list[DeviceArray]:
        return [a for a in self.arrays.values() if a.job.role == "output"]

    def inputs(self) -> list[DeviceArray]:
        return [a for a in self.arrays.values() if a.job.role == "input"]

    def prepare(self) -> None:
        """Re-arm the guards, restore modified inputs and poison every output."""
        for a in self.arrays.values():
            # Always re-armed: the last candidate may have written into them.
            a.buffer.fill_u32(GUARD_WORD, 0, a.guard)
            a.buffer.fill_u32(GUARD_WORD, a.guard + a.nbytes, a.guard)  # dtypes are 4 or 8 bytes wide
        for a in self.inputs():
            if a.dirty:
                a.buffer.upload(a.host, a.guard)
                a.dirty = False
        for a in self.outputs():
            a.buffer.fill_u32(POISON_WORD, a.guard, a.nbytes)

    def kernel_args(self) -> list[tuple[str, object]]:
        args = []
        for arg in self.job.args:
            args.append(("ptr", self.arrays[arg.array].ptr) if arg.array else (arg.kind, arg.value))
        return args

    def download(self, name: str) -> np.ndarray:
        a = self.arrays[name]
        out = np.empty(a.job.shape, dtype=a.job.dtype)
        a.buffer.download(out, a.guard)
        return out
