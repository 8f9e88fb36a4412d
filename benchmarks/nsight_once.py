"""Profile a workload kernel with Nsight Compute through warpsmith's own profiler
(warpsmith.agent.profiling.nsight: ncu --clock-control none, one launch per performance case) and
print the typed record per case. The raw CSV is kept beside it.

    python3 benchmarks/nsight_once.py WORKLOAD [KERNEL] [OUT_DIR] [KNOB=V,...] [CASE,...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from warpsmith.agent.evaluate.records import CandidateSpec
from warpsmith.agent.profiling.nsight import Nsight
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload


def main() -> int:
    workload = load_workload(Path(sys.argv[1]))
    kernel = sys.argv[2] if len(sys.argv) > 2 else workload.start
    out = Path(sys.argv[3]) if len(sys.argv) > 3 else Path("/tmp/warpsmith-nsight")
    defines = {k: int(v) for k, v in (kv.split("=") for kv in sys.argv[4].split(",") if kv)} if len(sys.argv) > 4 else {}
    spec = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels[kernel], defines), "start")
    cases = sys.argv[5].split(",") if len(sys.argv) > 5 else [c.name for c in workload.cases if c.timed]
    profiles = Nsight(workload.directory, out).profile(spec, cases, tag=f"{workload.name}-{kernel}")
    for p in profiles:
        print(f"{p.case}: {p.summary}")
        print(f"  suggests: {'; '.join(p.findings)}")
        print("  " + ", ".join(f"{k}={v:.4g}" for k, v in p.metrics.items()))
    print(f"raw CSV: {out / f'{workload.name}-{kernel}.ncu.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
