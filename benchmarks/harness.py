"""How fast and how trustworthy is the harness? (A benchmark, not a test.)

1. Per candidate: compile / validate / time / total wall ms for the SGEMM example
   (fresh CUBIN cache, so compile is real). Target: total <= 1 s per candidate.
2. The same kernel timed independently: CuPy launches the CUBIN warpsmith built,
   PyTorch CUDA events time it, a 256 MiB buffer is zeroed before each launch.
   Target: our median within 3% of theirs.
3. Repeatability: five evaluations of one kernel; the CV of the five medians.
   Target: <= 1%.

Run on the GPU machine: python3 benchmarks/harness.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ["WARPSMITH_CACHE"] = tempfile.mkdtemp(prefix="warpsmith-harness-")

from warpsmith.agent.evaluate.evaluator import Evaluator  # noqa: E402
from warpsmith.agent.spec.candidate import Candidate  # noqa: E402
from warpsmith.agent.spec.workload import load_workload  # noqa: E402

VARIANTS = [("naive", {}), ("tiled", {}), ("tiled", {"BM": 128, "BN": 128}), ("tiled", {"BK": 16, "TN": 4}),
            ("tiled", {"BM": 32, "BN": 64, "TM": 4})]


def per_candidate(ev: Evaluator, workload) -> list:
    rows = []
    ev.evaluate(Candidate.from_spec(workload.kernels["naive"]), time_cases=False)  # one-time case setup
    for kernel, defines in VARIANTS:
        c = Candidate.from_spec(workload.kernels[kernel], defines)
        r = ev.evaluate(c)
        label = kernel + ("".join(f" {k}={v}" for k, v in defines.items()))
        label += " (cached)" if r.compiled.cached else ""
        rows.append((label, r.status, r.compiled.compile_ms, r.wall_ms["compile"], r.wall_ms["validate"], r.wall_ms["time"],
                     r.wall_ms["total"], r.score_ms or float("nan")))
    return rows


def torch_median(cubin: bytes, symbol: str, case, launch, reps: int = 100) -> float:
    import cupy
    import torch
    path = Path(tempfile.mkdtemp()) / "k.cubin"
    path.write_bytes(cubin)
    fn = cupy.RawModule(path=str(path)).get_function(symbol)
    M, N, K = case.sizes["M"], case.sizes["N"], case.sizes["K"]
    a = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(K, N, device="cuda") * 2 - 1
    c = torch.empty(M, N, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream()
    with warnings.catch_warnings():  # CuPy 14 deprecates ExternalStream; it still is the simplest bridge
        warnings.simplefilter("ignore", DeprecationWarning)
        cstream = cupy.cuda.ExternalStream(stream.cuda_stream)
    args = (cupy.asarray(a), cupy.asarray(b), cupy.asarray(c), cupy.int32(M), cupy.int32(N), cupy.int32(K))
    def run():
        fn(launch.grid, launch.block, args, shared_mem=launch.shared, stream=cstream)
    for _ in range(10):
        flush.zero_()
        run()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        starts[i].record(stream)
        run()
        ends[i].record(stream)
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def main() -> int:
    workload = load_workload(ROOT / "examples" / "sgemm")
    with Evaluator(workload) as ev:
        print(f"GPU: {ev.facts.name}, flush buffer {2 * ev.facts.l2_bytes >> 20} MiB")
        rows = per_candidate(ev, workload)
        print("\n1. per candidate, ms (7 cases validated twice, 3 timed: 100 reps or 300 ms, cold L2)")
        print(f"{'candidate':<36}{'status':<8}{'nvrtc':>7}{'compile':>9}{'validate':>10}{'time':>9}{'total':>9}{'score':>10}")
        for label, status, nvrtc, comp, val, tim, tot, score in rows:
            print(f"{label:<36}{status:<8}{nvrtc:>7.0f}{comp:>9.0f}{val:>10.0f}{tim:>9.0f}{tot:>9.0f}{score:>10.4f}")

        print("\n2. our median vs CuPy launch + torch events + 256 MiB flush (same CUBIN)")
        print(f"{'kernel':<10}{'case':<22}{'ours ms':>10}{'torch ms':>10}{'diff %':>8}")
        diffs = []
        for kernel in ("naive", "tiled"):
            c = Candidate.from_spec(workload.kernels[kernel])
            r = ev.evaluate(c)
            for case in workload.cases:
                if not case.timed:
                    continue
                ours = r.case(case.name).timing.median_ms
                theirs = torch_median(r.compiled.cubin, r.compiled.symbol, case, r.case(case.name).launch)
                diffs.append(abs(ours / theirs - 1) * 100)
                print(f"{kernel:<10}{case.name:<22}{ours:>10.4f}{theirs:>10.4f}{(ours / theirs - 1) * 100:>8.2f}")

        print("\n3. repeatability: 5 evaluations of the tiled kernel")
        tiled = Candidate.from_spec(workload.kernels["tiled"])
        medians = {case.name: [] for case in workload.cases if case.timed}
        for _ in range(5):
            r = ev.evaluate(tiled)
            for name in medians:
                medians[name].append(r.case(name).timing.median_ms)
        cvs = []
        for name, values in medians.items():
            cv = statistics.stdev(values) / statistics.mean(values) * 100
            cvs.append(cv)
            print(f"{name:<22} medians {' '.join(f'{v:.4f}' for v in values)}  CV {cv:.2f}%")
    worst_total = max(r[6] for r in rows)
    print(f"\nSUMMARY  eval/candidate max {worst_total:.0f} ms (target 1000)  |  "
          f"vs torch max |diff| {max(diffs):.2f}% (target 3)  |  repeat CV max {max(cvs):.2f}% (target 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
