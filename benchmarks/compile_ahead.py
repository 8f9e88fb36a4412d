"""How long the GPU would wait on the tuner's compiles, with and without compiling ahead.

    python benchmarks/compile_ahead.py [WORKLOAD_DIR] [KERNEL] [PROPOSALS] [GPU_SECONDS]

Runs the `tune` proposer for PROPOSALS proposals on KERNEL (default: examples/sgemm
warptile, 12 proposals) with real NVRTC, twice: `ahead=0` (every compile when the
proposal is made, as before) and `ahead=<host cores>` (the next candidates compiled
while the GPU works). Between proposals a sleep of GPU_SECONDS (default 1.0, about
one sgemm attempt on the H200) stands in for the GPU's validation and timing. Each
run gets an empty compile cache. The score of a configuration is a made-up smooth
function of its knobs, so both runs propose the same sequence.

Prints, per run, the time spent inside propose() (what the GPU waits for) and the
share of wall time it is; the last line compares the two.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(workload_dir: Path, kernel: str, proposals: int, gpu_s: float, ahead: int) -> tuple[float, float]:
    from warpsmith.agent.evaluate.records import Attempt
    from warpsmith.agent.proposers.base import ProposalContext
    from warpsmith.agent.proposers.tune import TuneProposer
    from warpsmith.agent.runtime.device_facts import DeviceFacts
    from warpsmith.agent.spec.workload import load_workload
    w = load_workload(workload_dir)
    tuner, history, waited = TuneProposer(0, kernel=kernel, ahead=ahead), [], 0.0
    facts = DeviceFacts(arch="sm_90")
    t_start = time.perf_counter()
    for i in range(1, proposals + 1):
        t0 = time.perf_counter()
        spec = tuner.propose(ProposalContext(w, facts, i, "optimise", list(history), None,
                                             history[-1] if history else None)).spec
        waited += time.perf_counter() - t0
        time.sleep(gpu_s)  # the GPU validates and times it; compiles ahead run meanwhile
        score = 1.0 + sum(abs(v - 64) for v in spec.defines.values()) / 1000
        history.append(Attempt(iteration=i, name=spec.name, proposer="tune", status="ok", score_ms=score,
                               defines=spec.defines))
    return waited, time.perf_counter() - t_start


def main(argv: list[str]) -> int:
    workload_dir = Path(argv[0]) if argv else ROOT / "examples" / "sgemm"
    kernel = argv[1] if len(argv) > 1 else "warptile"
    proposals = int(argv[2]) if len(argv) > 2 else 12
    gpu_s = float(argv[3]) if len(argv) > 3 else 1.0
    cores = os.cpu_count() or 1
    results = {}
    for ahead in (0, cores):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["WARPSMITH_CACHE"] = cache  # every run compiles from nothing
            waited, wall = run(workload_dir, kernel, proposals, gpu_s, ahead)
        results[ahead] = waited
        print(f"ahead={ahead}: {proposals} proposals of {kernel}, GPU stand-in {gpu_s:g} s each: "
              f"waited {waited:.1f} s in propose() ({waited / proposals:.2f} s per proposal, "
              f"{waited / wall:.0%} of {wall:.1f} s wall)")
    print(f"SUMMARY compile ahead on {cores} cores: GPU wait per proposal {results[0] / proposals:.2f} s -> "
          f"{results[cores] / proposals:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
