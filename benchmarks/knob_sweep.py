"""Time a workload kernel at several knob settings against the fastest library baseline
of each case (every baseline the workload has), all in one worker (one GPU context),
one line per setting; the baselines are timed before and after the settings.

    python benchmarks/knob_sweep.py examples/sgemm warptile "" "MINB=1" "BM=128,BN=256,WN=64,MINB=1"
    python benchmarks/knob_sweep.py --shapes benchmarks/row_lengths.toml --no-baseline examples/softmax split "" "NBUF=6"

"" is the kernel's declared defaults. --shapes FILE times your shapes instead of the
workload's performance cases (the form of `warpsmith bench --shapes`); --no-baseline skips
the libraries (each setting's % of the floor is still printed). Each setting is validated on every case
before it is timed (the evaluator's usual gate); a failing one prints its status.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.shapes import load_shapes
from warpsmith.agent.spec.speed_of_light import case_floor
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig


def parse(setting: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in setting.split(",") if kv)}


def floor_pct(ev: Evaluator, w, case: str, median_ms: float) -> str:
    """', 91% of floor' where the workload has [metrics] and the worker measured ceilings."""
    floor = case_floor(w, w.case(case), ev.ceilings, median_ms) if ev.ceilings else None
    return f", {floor.pct_of_floor:.0%} of floor" if floor and floor.pct_of_floor else ""


def fastest_baselines(ev: Evaluator, timed: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Per performance case, the fastest library baseline's median and its name (cuBLAS,
    PyTorch eager, torch.compile: whichever the workload has and this machine runs)."""
    best_ms: dict[str, float] = {}
    best_kind: dict[str, str] = {}
    for kind in ev.baseline_kinds():
        r = ev.baseline(kind=kind)
        if r is None or not r.ok:
            continue
        for c in r.cases:
            if c.timing and c.case in timed and c.timing.median_ms < best_ms.get(c.case, float("inf")):
                best_ms[c.case], best_kind[c.case] = c.timing.median_ms, kind
    return best_ms, best_kind


def baseline_line(label: str, timed: list[str], best_ms: dict[str, float], best_kind: dict[str, str]) -> str:
    return f"{label}: " + ", ".join(f"{n} {best_kind[n]} {best_ms[n]:.4f} ms" for n in timed if n in best_ms)


def main(workload_dir: str, kernel: str, settings: list[str], shapes: Path | None, baseline: bool) -> None:
    w = load_workload(workload_dir)
    if shapes is not None:
        w = load_workload(workload_dir, load_shapes(shapes)[w.name])
    timed = [c.name for c in w.cases if c.timed]
    with Evaluator(w, EvaluationOptions(TimingConfig(), kernel_timeout_s=20.0)) as ev:
        base_ms, kinds = fastest_baselines(ev, timed) if baseline else ({}, {})
        print(f"{w.name}/{kernel} on {ev.facts.name or '?'}; "
              + baseline_line("fastest library per case", timed, base_ms, kinds), flush=True)
        print("setting | " + " | ".join(timed) + " | geomean vs the fastest library")
        for setting in settings or ("",):
            r = ev.evaluate(Candidate.from_spec(w.kernels[kernel], parse(setting)))
            if not r.ok:
                print(f"{setting or 'defaults'} | {r.status}: {r.detail.splitlines()[0] if r.detail else ''}", flush=True)
                continue
            ms = {c.case: c.timing.median_ms for c in r.cases if c.timing}
            cells = [(f"{ms[n]:.4f} ({base_ms[n] / ms[n]:.3f}x{floor_pct(ev, w, n, ms[n])})" if n in base_ms
                      else f"{ms[n]:.4f} ({floor_pct(ev, w, n, ms[n]).lstrip(', ')})") if n in ms else "n/a"
                     for n in timed]
            shared = [n for n in timed if n in base_ms and n in ms]
            ratio = math.prod(base_ms[n] / ms[n] for n in shared) ** (1 / len(shared)) if shared else float("nan")
            print(f"{setting or 'defaults'} | " + " | ".join(cells) + f" | {ratio:.3f}x", flush=True)
        if baseline:  # again at the end: a drift of the clocks over the sweep shows as a change here
            print(baseline_line("the libraries again", timed, *fastest_baselines(ev, timed)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("kernel")
    parser.add_argument("settings", nargs="*", help="NAME=VALUE,... per setting; \"\" is the defaults")
    parser.add_argument("--shapes", type=Path, help="performance shapes to time instead of the workload's")
    parser.add_argument("--no-baseline", action="store_true", help="skip the libraries")
    a = parser.parse_args()
    main(a.workload, a.kernel, a.settings, a.shapes, not a.no_baseline)
