"""How many bytes a case needs, checked before anything is drawn or allocated.

A case that cannot fit is refused up front with one line naming the case and the
bytes against the limit, not found out later as a MemoryError in the reference or
an out-of-memory error in the worker. The host bound (the reference runs there,
in float64) is known before any GPU work; the GPU bound once the device's facts
are (`total_memory`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..spec.workload import ARRAY_ITEMSIZE as ITEMSIZE
from ..spec.workload import FLOAT_DTYPES, Case, SpecError, Workload
from .case_buffers import MOAT_BYTES, guard_bytes
from .pages import in_pages

HOST_FRACTION = 0.8  # of MemAvailable: the rest is for everything else on the machine
GPU_FRACTION = 0.9  # of the GPU's memory: the context, the L2 flush buffer, cuBLAS's workspace


def case_footprint(workload: Workload, case: Case, where: str = "gpu") -> int:
    """Bytes `case` holds at once, computed exactly (Python ints never overflow).

    where="gpu": what the worker allocates for the case (agent/worker/case_buffers.py):
    every array between two guard bands, each output's reference on the device
    (float64 for float outputs), each in whole pages (agent/worker/pages.py), and the
    two sentinel moats around the arrays.
    where="host": what the reference process holds: the inputs in their dtype, a
    float64 copy of each float input, and each output twice in float64 (what
    reference.py returns and its contiguous copy).
    """
    total = 2 * MOAT_BYTES if where == "gpu" else 0
    for p in workload.arrays:
        elements = math.prod(workload.shape(p, case))
        nbytes = elements * ITEMSIZE[p.dtype]
        is_float = p.dtype in FLOAT_DTYPES
        if where == "gpu":
            total += in_pages(nbytes + 2 * guard_bytes(nbytes))
            total += 0 if p.role == "input" else in_pages(elements * 8 if is_float else nbytes)
        elif p.role == "input":
            total += nbytes + (elements * 8 if is_float else 0)
        else:
            total += 2 * (elements * 8 if is_float else nbytes)
    return total


def host_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> Optional[int]:
    """MemAvailable from /proc/meminfo, or None where it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB ({n} bytes)" if n >= 2**30 else f"{n / 2**20:.1f} MiB ({n} bytes)"


def check_memory(workload: Workload, gpu_bytes: Optional[int] = None, host_bytes: Optional[int] = None,
                 host: bool = True, only: Optional[Sequence[Case]] = None,
                 reference_bytes: Mapping[str, int] = {}) -> None:
    """Raise SpecError (one line, naming the case) when a case (of `only`, default every
    case) cannot fit: on the host (`host_bytes`, default MemAvailable) unless host=False,
    and on the GPU where its memory `gpu_bytes` (DeviceFacts.total_memory) is known.
    `reference_bytes`: by case name, what the reference holds besides the arrays
    (reference.py's reference_memory(), agent/spec/reference_memory.py)."""
    toml = workload.directory / "workload.toml"
    host_bytes = host_available_bytes() if host and host_bytes is None else host_bytes
    for i, case in enumerate(workload.cases):
        if only is not None and case not in only:
            continue
        if host and host_bytes is not None:
            arrays, extra = case_footprint(workload, case, "host"), reference_bytes.get(case.name, 0)
            need, limit = arrays + extra, int(host_bytes * HOST_FRACTION)
            if need > limit:
                parts = f" ({_size(arrays)} of arrays, {_size(extra)} more by reference.py's reference_memory())" \
                    if extra else ""
                raise SpecError(toml, f"cases[{i}]", f"case '{case.name}' needs {_size(need)} of host memory for "
                                f"its float64 reference{parts}, more than {HOST_FRACTION:.0%} of the "
                                f"{_size(host_bytes)} available")
        if gpu_bytes is not None:
            need, limit = case_footprint(workload, case, "gpu"), int(gpu_bytes * GPU_FRACTION)
            if need > limit:
                raise SpecError(toml, f"cases[{i}]", f"case '{case.name}' needs {_size(need)} of GPU memory "
                                f"(arrays, guard bands, input copies, reference), more than {GPU_FRACTION:.0%} "
                                f"of the GPU's {_size(gpu_bytes)}")
