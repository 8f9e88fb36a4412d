"""How far a result is from the hardware's limit.

The floor of a case is the larger of its FLOPs over the GPU's arithmetic rate
and the time its bytes take through memory (the workload's [metrics] formulas).

Memory time is not one rate: a kernel that only reads can run faster than a copy
(no write turnaround on the bus), and judged at the copy rate it would be refused as
faster than physics. Two rates are measured, a copy (C: bytes read + written per
second, in equal parts) and a read-only stream (R), and a case's bytes are split into
reads and writes by its arrays (inputs read once, outputs written once). Each read
paired with a write goes at the copy rate, the reads beyond them at max(R, C), the
writes beyond them at C: exact at both measured points (a copy, a pure read), and never
a higher floor than every byte at C (the rule before the read rate), so the harness
refuses nothing it accepted before. Without a read rate (a cache written before it was
measured, the datasheet) every byte goes at C.
Ceilings should be measured once per GPU (a large device-to-device copy, an FMA
loop) and cached by GPU UUID; until they are, datasheet leads are used and the
report says so. A median below the floor is physically impossible: the result
is `suspect` (a timing or validation hole), never silently a new best.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

from ..runtime.cache_dir import cache_root
from ..runtime.device_facts import DeviceFacts
from .half_float import is_fp8, is_narrow
from .timing_policy import SUSPECT_MARGIN
from .workload_model import Case, Workload

# Leads from the vendor's datasheet (H200 SXM: 4.8 TB/s HBM3e, 67 TFLOP/s fp32),
# used only until the GPU's own ceilings have been measured.
DATASHEET = {"NVIDIA H200": (4800.0, 67.0)}
# A read-only stream past 1.25x the copy rate is not one a memory bus gives (the H200's
# reads ran at ~1.05x its copy rate): a read rate above that is a measurement gone wrong.
READ_OVER_COPY = 1.25

# Dense 16-bit tensor-core FMAs per SM per clock with fp32 accumulation, by compute
# capability: A100 (8.0) 1024 (312 TFLOP/s on 108 SMs at 1.41 GHz), H100/H200 (9.0)
# 2048 (989 TFLOP/s on 132 SMs at 1.83 GHz). TF32 runs at half that. The peak is this
# rate at the GPU's top SM clock: nothing can beat it, so a kernel (cuBLAS included)
# is never called faster than physics by it; a measured wgmma loop would be tighter.
TENSOR_FMA_PER_SM_CLOCK = {(8, 0): 1024, (9, 0): 2048}
# fp8 inputs go twice as fast on Hopper (1979 TFLOP/s dense on the H100 SXM); on GPUs
# without fp8 tensor cores twice the 16-bit rate is still a bound nothing beats.
FP8_OVER_16_BIT = 2
# A split's products per product, over the 16-bit rate: TF32 runs at half of it.
SPLIT_SLOWDOWN = {"3xTF32": 6, "3xBF16": 3, "3xF16": 3}


@dataclass(frozen=True)
class Ceilings:
    bandwidth_gbs: float  # bytes read + written per second, in GB/s
    fp32_tflops: float
    source: str  # "measured on <uuid> <date>" or "datasheet"
    # Dense bf16/fp16 tensor-core rate (fp32 accumulate): the compute ceiling of workloads
    # with 16-bit inputs, and half of it of fp32 ones that allow TF32. None: unknown GPU.
    tensor_tflops: Optional[float] = None
    # Bytes read per second by a read-only stream, in GB/s. None: not measured (every
    # byte then goes at bandwidth_gbs).
    read_gbs: Optional[float] = None

    def memory_ms(self, read_bytes: float, write_bytes: float) -> float:
        """The fewest milliseconds these bytes take through memory (the module's docstring)."""
        copy = self.bandwidth_gbs * 1e9
        # max(R, C), and never past READ_OVER_COPY x C: a corrupt or absurd read rate must not
        # take a read-bound case's floor (the harness's check against faster-than-physics) to zero
        read = min(max(copy, (self.read_gbs or 0.0) * 1e9), READ_OVER_COPY * copy) \
            if self.read_gbs is not None and math.isfinite(self.read_gbs) else copy
        paired = min(read_bytes, write_bytes)
        return (2 * paired / copy + (read_bytes - paired) / read + (write_bytes - paired) / copy) * 1e3


def tensor_peak_tflops(facts: DeviceFacts) -> Optional[float]:
    """The tensor-core peak of this GPU at its top SM clock, None where the rate is not known."""
    per_clock = TENSOR_FMA_PER_SM_CLOCK.get((facts.cc_major, facts.cc_minor))
    if not per_clock or not facts.sm_count or not facts.sm_clock_khz:
        return None
    return round(facts.sm_count * per_clock * 2 * facts.sm_clock_khz * 1e3 / 1e12, 1)


def compute_ceiling(workload: Workload, ceilings: Ceilings) -> tuple[float, str]:
    """The arithmetic rate a workload's floor is computed from (TFLOP/s) and its name.

    A float32 workload's rate is the faster of the FFMA rate and each error-compensated
    split it names (`splits = ["3xTF32"]`): three tensor-core products per product at the
    rate of the split's type (TF32 at half the 16-bit rate: 1070 / 2 / 3 = 178 TFLOP/s on
    the H200). Nothing faster is legitimate: the machine-code policy
    (agent/spec/precision_policy.py) refuses tensor-core math in any other narrow type,
    and a split with fewer products (plain TF32, two terms) misses the float32 tolerance
    by an order of magnitude."""
    if ceilings.tensor_tflops:
        if any(is_fp8(a.dtype) for a in workload.inputs):
            return ceilings.tensor_tflops * FP8_OVER_16_BIT, "fp8 tensor core"
        if any(is_narrow(a.dtype) for a in workload.inputs):
            return ceilings.tensor_tflops, "16-bit tensor core"
        if workload.tolerance.allow_tf32:
            return ceilings.tensor_tflops / 2, "TF32 tensor core"
        split_rates = [(ceilings.tensor_tflops / SPLIT_SLOWDOWN[s], f"{s} tensor core")
                       for s in workload.tolerance.splits]
        fastest = max(split_rates, default=(0.0, ""))
        if fastest[0] > ceilings.fp32_tflops:
            return fastest
    return ceilings.fp32_tflops, "fp32"


@dataclass(frozen=True)
class CaseFloor:
    case: str
    floor_ms: float
    bound: str  # memory | compute
    pct_of_floor: Optional[float] = None  # floor / median, 1.0 = at the limit
    suspect: bool = False


def ceilings_path(uuid: str) -> Path:
    return cache_root() / "ceilings" / f"{uuid}.json"


def load_ceilings(facts: DeviceFacts) -> Optional[Ceilings]:
    """Measured ceilings for this GPU if cached, else the datasheet lead, else None."""
    path = ceilings_path(facts.uuid or "unknown")
    try:
        found = Ceilings(**json.loads(path.read_text()))
        return found if found.tensor_tflops else replace(found, tensor_tflops=tensor_peak_tflops(facts))
    except (OSError, ValueError, TypeError):  # none yet, or unreadable: measure again / datasheet
        pass
    lead = DATASHEET.get(facts.name)
    return Ceilings(lead[0], lead[1], "datasheet", tensor_peak_tflops(facts)) if lead else None


def save_ceilings(facts: DeviceFacts, ceilings: Ceilings) -> None:
    path = ceilings_path(facts.uuid or "unknown")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another worker may be reading: replace, never half-write
    tmp.write_text(json.dumps(asdict(ceilings)))
    os.replace(tmp, path)


def read_share(workload: Workload, case: Case) -> float:
    """The part of a case's bytes that are reads: its inputs' bytes over its arrays' (an
    output is written once, an input read once); 0.5 where the arrays hold no bytes."""
    reads = sum(workload.array_bytes(p, case) for p in workload.inputs)
    writes = sum(workload.array_bytes(p, case) for p in workload.outputs)
    return reads / (reads + writes) if reads + writes else 0.5


def case_floor(workload: Workload, case: Case, ceilings: Ceilings, median_ms: Optional[float] = None) -> Optional[CaseFloor]:
    if workload.flops is None and workload.bytes is None:
        return None
    rate, _ = compute_ceiling(workload, ceilings)
    compute_ms = workload.flops.evaluate(case.sizes) / (rate * 1e12) * 1e3 if workload.flops else 0.0
    memory_ms = 0.0
    if workload.bytes:
        total, share = float(workload.bytes.evaluate(case.sizes)), read_share(workload, case)
        memory_ms = ceilings.memory_ms(total * share, total * (1.0 - share))
    floor = max(compute_ms, memory_ms)
    bound = "compute" if compute_ms >= memory_ms else "memory"
    if median_ms is None or median_ms <= 0:
        return CaseFloor(case.name, floor, bound)
    return CaseFloor(case.name, floor, bound, floor / median_ms, median_ms < floor * SUSPECT_MARGIN)
