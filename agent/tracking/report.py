"""Per-case tables for people and JSON for machines."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Optional

from ..evaluate.results import EvaluationResult, Status
from ..runtime.device_facts import DeviceFacts
from ..spec.speed_of_light import Ceilings, case_floor, compute_ceiling
from ..spec.workload_model import Workload


def throughput(workload: Workload, case_name: str, median_ms: float) -> str:
    case = workload.case(case_name)
    if workload.flops is not None:
        return f"{workload.flops.evaluate(case.sizes) / (median_ms * 1e-3) / 1e12:.2f} TFLOP/s"
    if workload.bytes is not None:
        return f"{workload.bytes.evaluate(case.sizes) / (median_ms * 1e-3) / 1e9:.0f} GB/s"
    return ""


def _fmt(x: Optional[float], spec: str = ".4f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def render_table(workload: Workload, result: EvaluationResult, baseline: Optional[EvaluationResult],
                 ceilings: Optional[Ceilings] = None) -> str:
    """`ceilings`: the GPU's limits; adds "% floor" (floor / median) per timed case."""
    head = ["case", "role", "status", "max rel err", "median ms", "min ms", "p90 ms", "CV %", "rate",
            f"{baseline.candidate} ms" if baseline else "baseline", "speed-up", "% floor"]
    rows = [head]
    for c in result.cases:
        t = c.timing
        b = baseline.case(c.case) if baseline else None
        bt = b.timing if b and b.status == Status.OK else None
        rows.append([
            c.case, c.role[:4], c.status,
            _fmt(c.check.max_rel_error, ".2e") if c.check else "-",
            _fmt(t.median_ms if t else None), _fmt(t.min_ms if t else None), _fmt(t.p90_ms if t else None),
            _fmt(t.cv * 100 if t else None, ".2f"),
            throughput(workload, c.case, t.median_ms) if t else "",
            _fmt(bt.median_ms if bt else None) if b is None or b.status == Status.OK else b.status,
            f"{bt.median_ms / t.median_ms:.2f}x" if t and bt else "-",
            _floor_text(workload, c.case, t.median_ms, ceilings) if t else "-",
        ])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(summary_line(result, baseline))
    if ceilings:
        rate, kind = compute_ceiling(workload, ceilings)
        lines.append(f"% floor: the case's FLOP/byte floor over its median, from {rate:g} TFLOP/s {kind} "
                     f"and {ceilings.bandwidth_gbs:g} GB/s"
                     + (f" (reads beyond the writes at {ceilings.read_gbs:g} GB/s)" if ceilings.read_gbs else "")
                     + f" ({ceilings.source}); SUSPECT = faster than physically possible")
    clocks = [c.clocks_mhz for c in result.cases if c.clocks_mhz]
    if clocks:
        sm = sorted(x for c in clocks for x in (c[0], c[2]))
        mem = sorted(x for c in clocks for x in (c[1], c[3]))
        lines.append(f"clocks while timing (NVML, before/after each case): SM {sm[0]}-{sm[-1]} MHz, "
                     f"memory {mem[0]}-{mem[-1]} MHz")
    return "\n".join(lines)


def _floor_text(workload: Workload, case: str, median_ms: float, ceilings: Optional[Ceilings]) -> str:
    f = case_floor(workload, workload.case(case), ceilings, median_ms) if ceilings else None
    if f is None or f.pct_of_floor is None:
        return "-"
    return f"{f.pct_of_floor * 100:.0f}% {f.bound[:3]}" + (" SUSPECT" if f.suspect else "")


def summary_line(result: EvaluationResult, baseline: Optional[EvaluationResult]) -> str:
    if result.score_ms is None:
        return f"status: {result.status}" + (f"\n{result.detail}" if result.detail else "")
    text = f"status: ok   score (geomean of performance medians): {result.score_ms:.4f} ms"
    if baseline and baseline.score_ms:
        text += f"   {baseline.candidate}: {baseline.score_ms:.4f} ms   speed-up: {baseline.score_ms / result.score_ms:.2f}x"
    return text


def to_json(workload: Workload, result: EvaluationResult, baseline: Optional[EvaluationResult],
            facts: DeviceFacts) -> dict[str, Any]:
    def plain(r: Optional[EvaluationResult]) -> Optional[dict[str, Any]]:
        if r is None:
            return None
        d = asdict(r)
        if d.get("compiled"):
            d["compiled"].pop("cubin", None)
        return d
    return {"workload": workload.name, "digest": workload.digest, "gpu": facts.to_dict(), "candidate": plain(result),
            "baseline": plain(baseline)}
