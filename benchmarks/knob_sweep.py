"""Time a workload kernel at several knob settings against the workload's baseline,
all in one worker (one GPU context, the baseline timed once), one line per setting.

    python benchmarks/knob_sweep.py examples/sgemm warptile "" "MINB=1" "BM=128,BN=256,WN=64,MINB=1"

"" is the kernel's declared defaults. Each setting is validated on every case
before it is timed (the evaluator's usual gate); a failing one prints its status.
"""

from __future__ import annotations

import sys

from agent.evaluate.evaluator import Evaluator
from agent.evaluate.options import EvaluationOptions
from agent.spec.candidate import Candidate
from agent.spec.speed_of_light import case_floor
from agent.spec.workload import load_workload
from agent.worker.protocol import TimingConfig


def parse(setting: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in setting.split(",") if kv)}


def floor_pct(ev: Evaluator, w, case: str, median_ms: float) -> str:
    """', 91% of floor' where the workload has [metrics] and the worker measured ceilings."""
    floor = case_floor(w, w.case(case), ev.ceilings, median_ms) if ev.ceilings else None
    return f", {floor.pct_of_floor:.0%} of floor" if floor and floor.pct_of_floor else ""


def main(workload_dir: str, kernel: str, *settings: str) -> None:
    w = load_workload(workload_dir)
    timed = [c.name for c in w.cases if c.timed]
    with Evaluator(w, EvaluationOptions(TimingConfig(), kernel_timeout_s=20.0)) as ev:
        base = ev.baseline()
        base_ms = {c.case: c.timing.median_ms for c in base.cases if c.timing} if base and base.ok else {}
        print(f"{w.name}/{kernel} on {ev.facts.name or '?'}; baseline {w.baseline.primary}: "
              + ", ".join(f"{n} {base_ms[n]:.4f} ms" for n in timed if n in base_ms), flush=True)
        print("setting | " + " | ".join(timed) + " | geomean vs baseline")
        for setting in settings or ("",):
            r = ev.evaluate(Candidate.from_spec(w.kernels[kernel], parse(setting)))
            if not r.ok:
                print(f"{setting or 'defaults'} | {r.status}: {r.detail.splitlines()[0] if r.detail else ''}", flush=True)
                continue
            ms = {c.case: c.timing.median_ms for c in r.cases if c.timing}
            cells = [f"{ms[n]:.4f} ({base_ms[n] / ms[n]:.2f}x{floor_pct(ev, w, n, ms[n])})" if n in base_ms
                     else f"{ms[n]:.4f}" for n in timed]
            ratio = base.score_ms / r.score_ms if base_ms else float("nan")
            print(f"{setting or 'defaults'} | " + " | ".join(cells) + f" | {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
