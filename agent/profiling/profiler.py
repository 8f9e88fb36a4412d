"""Nsight Compute (ncu), run as a separate process on one launch of a kernel, with
a curated metric set, never changing the card's clocks (--clock-control none).
Profiler replay time never enters a latency: this is a separate run.

The CSV (``--csv --page raw``: a header row of metric names, a row of units, one
row per profiled launch) becomes a typed record.
"""

from __future__ import annotations

import csv
import io
import shutil
from dataclasses import dataclass, field
from typing import Callable, Optional

STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "lg_throttle", "math_pipe_throttle",
          "wait", "not_selected", "membar", "tex_throttle", "drain", "imc_miss", "no_instruction", "dispatch_stall")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"

METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "l1_hit_pct": "l1tex__t_sector_hit_rate.pct",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers_per_thread": "launch__registers_per_thread",
    "shared_static_bytes": "launch__shared_mem_per_block_static",
    "shared_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "occupancy_limit_registers": "launch__occupancy_limit_registers",
    "occupancy_limit_shared": "launch__occupancy_limit_shared_mem",
    "occupancy_limit_warps": "launch__occupancy_limit_warps",
    "occupancy_limit_blocks": "launch__occupancy_limit_blocks",
    "instructions": "smsp__inst_executed.sum",
    "bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
}


class ProfilerUnavailable(RuntimeError):
    """ncu missing or not permitted to read counters: the run goes on without it.
    `transient`: only this profile failed (a timeout); the next one may work."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class KernelProfile:
    kernel: str
    duration_ns: float = 0.0
    sm_throughput_pct: float = 0.0
    memory_throughput_pct: float = 0.0
    dram_read_bytes: float = 0.0
    dram_write_bytes: float = 0.0
    l1_hit_pct: float = 0.0
    l2_hit_pct: float = 0.0
    achieved_occupancy_pct: float = 0.0
    registers_per_thread: float = 0.0
    shared_static_bytes: float = 0.0
    shared_dynamic_bytes: float = 0.0
    occupancy_limit_registers: float = 0.0
    occupancy_limit_shared: float = 0.0
    occupancy_limit_warps: float = 0.0
    occupancy_limit_blocks: float = 0.0
    instructions: float = 0.0
    bank_conflicts: float = 0.0
    stalls: dict[str, float] = field(default_factory=dict)  # reason -> cycles per issued instruction

    @property
    def occupancy_limiter(self) -> str:
        limits = {"registers": self.occupancy_limit_registers, "shared memory": self.occupancy_limit_shared,
                  "warps": self.occupancy_limit_warps, "blocks": self.occupancy_limit_blocks}
        known = {k: v for k, v in limits.items() if v > 0}
        return min(known, key=known.__getitem__) if known else "unknown"

    def metrics(self) -> dict[str, float]:
        """The numbers, flat: every curated metric and each stall reason (for MLflow)."""
        out = {key: getattr(self, key) for key in METRICS}
        out.update({f"stall_{k}": v for k, v in self.stalls.items()})
        return out

    def top_stalls(self, n: int = 3) -> list[tuple[str, float]]:
        return sorted(self.stalls.items(), key=lambda kv: -kv[1])[:n]

    @property
    def dram_gbs(self) -> float:
        return (self.dram_read_bytes + self.dram_write_bytes) / self.duration_ns if self.duration_ns else 0.0

    def findings(self, bandwidth_gbs: float = 4800.0) -> list[str]:
        """What the numbers suggest, in words the knowledge base retrieves on.
        ncu's memory throughput is the busiest memory unit (DRAM, L2, L1 or shared),
        so DRAM's own share, against `bandwidth_gbs`, tells which kind of memory bound."""
        out = []
        dram_share = self.dram_gbs / bandwidth_gbs
        if self.memory_throughput_pct > 60 and self.memory_throughput_pct > self.sm_throughput_pct:
            if dram_share > 0.5:
                out.append(f"DRAM bandwidth bound ({dram_share:.0%} of it): memory bound; raise bytes in flight, "
                           "vectorised coalesced loads, fewer passes over the data")
            else:
                out.append(f"on-chip memory bound (L1/L2/shared busy, DRAM only {dram_share:.0%}): reuse data from "
                           "shared memory and registers (tiling), vectorised loads, fewer bank conflicts")
        elif self.sm_throughput_pct > 60:
            out.append("compute bound: more work per instruction, tiling")
        else:
            out.append("latency bound: neither memory nor compute near peak; occupancy and ILP")
        if self.bank_conflicts > 0.05 * max(1.0, self.instructions):
            out.append("shared memory bank conflicts")
        if self.achieved_occupancy_pct and self.achieved_occupancy_pct < 25:
            out.append(f"low achieved occupancy (limited by {self.occupancy_limiter})")
        top = self.top_stalls(1)
        if top and top[0][1] > 1.0:
            out.append(f"warps mostly stalled on {top[0][0].replace('_', ' ')}")
        return out

    def text(self) -> str:
        stalls = ", ".join(f"{k} {v:.1f}" for k, v in self.top_stalls())
        return (f"{self.kernel}: {self.duration_ns / 1e3:.1f} us, SM {self.sm_throughput_pct:.0f}% / memory "
                f"{self.memory_throughput_pct:.0f}% of peak, DRAM {self.dram_read_bytes / 1e6:.1f} MB read "
                f"{self.dram_write_bytes / 1e6:.1f} MB written, L1 hit {self.l1_hit_pct:.0f}%, L2 hit "
                f"{self.l2_hit_pct:.0f}%, occupancy {self.achieved_occupancy_pct:.0f}% (limit: {self.occupancy_limiter}), "
                f"{self.registers_per_thread:.0f} regs/thread, {self.shared_static_bytes + self.shared_dynamic_bytes:.0f} "
                f"B shared/block, top stalls (cycles/instr): {stalls or '-'}")


def all_metrics() -> list[str]:
    return list(METRICS.values()) + [STALL_METRIC.format(s) for s in STALLS]


def ncu_command(kernel_regex: str, program: list[str], ncu: Optional[str] = None, launches: int = 1) -> list[str]:
    """`launches` launches of the named kernel, the curated metrics, clocks left alone."""
    exe = ncu or shutil.which("ncu")
    if not exe:
        raise ProfilerUnavailable("ncu (Nsight Compute) is not on PATH: install Nsight Compute or drop --use-nsight")
    return [exe, "--clock-control", "none", "--kernel-name", f"regex:{kernel_regex}", "--launch-count", str(launches),
            "--csv", "--page", "raw", "--metrics", ",".join(all_metrics()), *program]


def _number(text: str) -> float:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return 0.0  # "n/a" for metrics a GPU does not have


def parse_csv(text: str) -> list[KernelProfile]:
    """Rows of ncu's raw CSV page (lines before the header, e.g. ==PROF== notes, are skipped)."""
    if "ERR_NVGPUCTRPERM" in text:
        raise ProfilerUnavailable("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): "
                                  "profiling is skipped")
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if len(lines) < 3:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, data = rows[0], rows[2:]  # rows[1] holds the units
    col = {name: i for i, name in enumerate(header)}
    profiles = []
    for row in data:
        get: Callable[[str], float] = lambda metric: _number(row[col[metric]]) if metric in col and col[metric] < len(row) else 0.0
        values = {key: get(metric) for key, metric in METRICS.items()}
        stalls = {s: get(STALL_METRIC.format(s)) for s in STALLS if STALL_METRIC.format(s) in col}
        name = row[col["Kernel Name"]] if "Kernel Name" in col else "?"
        profiles.append(KernelProfile(kernel=name, stalls=stalls, **values))
    return profiles
