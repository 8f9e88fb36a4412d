"""Does a change to the harness change the latencies it reports? Evaluates each
example's kernels with two installs of warpsmith (BEFORE and AFTER: directories
to put first on PYTHONPATH), interleaved A B A B, and prints the per-case medians
side by side. The poisoning and the per-launch checks sit outside the event pairs,
so the medians must agree within the run-to-run noise.

    python3 benchmarks/harness_speed.py BEFORE_SITE AFTER_SITE [examples/sgemm:warptile ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["sgemm:naive", "sgemm:warptile", "gemm_bias_relu:tiled", "softmax:rowblock", "layernorm:rowblock",
           "rowsum:rowblock", "transpose:tiled"]


def medians(site: str, workload: Path, kernel: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "warpsmith.tui", "eval", str(workload), "--kernel", kernel, "--json"],
                          capture_output=True, text=True, env=env, cwd="/tmp", timeout=900)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(f"{workload.name}:{kernel} with {site}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}", flush=True)
        return {}
    cand = doc["candidate"]
    if cand["status"] != "ok":
        print(f"{workload.name}:{kernel} with {site}: {cand['status']}: {cand['detail'][:300]}", flush=True)
    return {c["case"]: c["timing"]["median_ms"] for c in cand["cases"] if c.get("timing")}


def main(argv: list[str]) -> int:
    before, after, *targets = argv
    rows = []
    for target in targets or DEFAULT:
        name, kernel = target.split(":")
        workload = ROOT / "examples" / name
        runs = [medians(site, workload, kernel) for site in (before, after, before, after)]
        for case in runs[1]:
            values = [r.get(case) for r in runs]
            if None in values:
                continue
            b, a = min(values[0], values[2]), min(values[1], values[3])
            rows.append((f"{name}:{kernel}", case, values, a / b))
        print(f"done {target}", flush=True)
    print("| workload:kernel | case | before ms (run 1, 2) | after ms (run 1, 2) | after / before (best of 2) |")
    print("|---|---|---|---|---|")
    for target, case, v, ratio in rows:
        print(f"| {target} | {case} | {v[0]:.4f}, {v[2]:.4f} | {v[1]:.4f}, {v[3]:.4f} | {ratio:.3f} |")
    if rows:
        ratios = sorted(r[3] for r in rows)
        print(f"SUMMARY harness speed: {len(rows)} cases, after/before median {ratios[len(ratios) // 2]:.3f}, "
              f"range {ratios[0]:.3f}-{ratios[-1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
