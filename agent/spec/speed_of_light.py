"""How far a result is from the hardware's limit.

The floor of a case is the larger of its FLOPs over the GPU's arithmetic rate
and its bytes over the memory bandwidth (the workload's [metrics] formulas).
Ceilings should be measured once per GPU (a large device-to-device copy, an FMA
loop) and cached by GPU UUID; until they are, datasheet leads are used and the
report says so. A median below the floor is physically impossible: the result
is `suspect` (a timing or validation hole), never silently a new best.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..runtime.cache_dir import cache_root
from ..runtime.device_facts import DeviceFacts
from .workload import Case, Workload

# Leads from the vendor's datasheet (H200 SXM: 4.8 TB/s HBM3e, 67 TFLOP/s fp32),
# used only until the GPU's own ceilings have been measured.
DATASHEET = {"NVIDIA H200": (4800.0, 67.0)}
SUSPECT_MARGIN = 0.97  # 3% of timing noise before "faster than the floor" is a red flag


@dataclass(frozen=True)
class Ceilings:
    bandwidth_gbs: float  # bytes read + written per second, in GB/s
    fp32_tflops: float
    source: str  # "measured on <uuid> <date>" or "datasheet"


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
        return Ceilings(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):  # none yet, or unreadable: measure again / datasheet
        pass
    lead = DATASHEET.get(facts.name)
    return Ceilings(lead[0], lead[1], "datasheet") if lead else None


def save_ceilings(facts: DeviceFacts, ceilings: Ceilings) -> None:
    path = ceilings_path(facts.uuid or "unknown")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another worker may be reading: replace, never half-write
    tmp.write_text(json.dumps(asdict(ceilings)))
    os.replace(tmp, path)


def case_floor(workload: Workload, case: Case, ceilings: Ceilings, median_ms: Optional[float] = None) -> Optional[CaseFloor]:
    if workload.flops is None and workload.bytes is None:
        return None
    compute_ms = workload.flops.evaluate(case.sizes) / (ceilings.fp32_tflops * 1e12) * 1e3 if workload.flops else 0.0
    memory_ms = workload.bytes.evaluate(case.sizes) / (ceilings.bandwidth_gbs * 1e9) * 1e3 if workload.bytes else 0.0
    floor = max(compute_ms, memory_ms)
    bound = "compute" if compute_ms >= memory_ms else "memory"
    if median_ms is None or median_ms <= 0:
        return CaseFloor(case.name, floor, bound)
    return CaseFloor(case.name, floor, bound, floor / median_ms, median_ms < floor * SUSPECT_MARGIN)
