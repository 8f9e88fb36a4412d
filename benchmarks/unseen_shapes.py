"""Shapes nobody here wrote: each workload benched on a shapes file's performance cases
(`warpsmith bench WORKLOAD --shapes FILE`), one process per workload, then every shape
against the fastest library there (cuBLAS, PyTorch eager, torch.compile) and its
speed-of-light floor, with the bars:

- every shape >= 1.00x the fastest library, and each workload's geomean >= 1.10x;
- softmax, layernorm and rmsnorm_bf16 at >= 90% of the floor on every shape.

    python benchmarks/unseen_shapes.py --out DIR [--shapes FILE] [--workloads sgemm,softmax]
                                       [--budget N] [--time-budget S]
    python benchmarks/unseen_shapes.py --summarize DIR/*.json

Each workload's `bench --json` lands in DIR as soon as it is measured. Needs a GPU for the
first form; the second only reads.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from warpsmith.agent.cli.bench import WorkloadBench, against_libraries
from warpsmith.agent.evaluate.stats import geomean
from warpsmith.agent.spec.shapes import load_shapes

ROOT = Path(__file__).resolve().parent.parent
NORMS = ("softmax", "layernorm", "rmsnorm_bf16")
EACH, GEOMEAN, FLOOR = 1.00, 1.10, 0.90


def bench(workload: str, shapes: Path, out: Path, budget: int, time_budget: float, extra: list[str]) -> Path:
    """One workload benched on its shapes, its JSON written to `out`."""
    target = out / f"{workload}.json"
    cmd = [sys.executable, "-m", "warpsmith.tui", "bench", str(ROOT / "examples" / workload), "--shapes", str(shapes),
           "--budget", str(budget), "--time-budget", str(time_budget), "--json", "--batch", "4", *extra]
    print("$ " + " ".join(cmd[2:]), file=sys.stderr, flush=True)
    # From `out`, not the checkout: the installed package (with its built runner) is imported
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=out)
    if done.returncode != 0:
        print(f"unseen_shapes: {workload}: bench exited {done.returncode}", file=sys.stderr)
    target.write_text(done.stdout or "[]")
    return target


def summarize(paths: list[Path]) -> int:
    """The table per shape and the bars; exit 1 when a bar is missed."""
    rows = ["| workload | shape | ours | ms | TFLOP/s | fastest library | ms | ours vs library | % floor |",
            "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for path in paths:
        results = json.loads(path.read_text() or "[]")
        if not results:
            verdicts.append(f"{path.name}: no bench result")
        for data in results:
            b = WorkloadBench.from_json(data)
            comparison = against_libraries(b)
            if comparison is None:
                verdicts.append(f"{b.workload}: no result against a library")
                continue
            ours = next(e for e in b.entries if e.role == comparison.ours and e.medians)
            for case, (ratio, lib) in comparison.per_case.items():
                library = next(e.medians[case] for e in b.baselines() if e.name == lib)
                row = next((r for r in b.rows if r["case"] == case and r["role"] == comparison.ours), {})
                pct, tflops = row.get("pct_of_floor"), row.get("tflops")
                rows.append(f"| {b.workload} | {case} | {comparison.ours} | {ours.medians[case]:.4f} | "
                            f"{f'{tflops:.1f}' if tflops else '-'} | {lib} | "
                            f"{library:.4f} | {ratio:.3f}x | {f'{pct:.0%}' if pct else '-'} |")
                if ratio < EACH:
                    verdicts.append(f"{b.workload} {case}: {ratio:.3f}x the fastest library, under {EACH:.2f}x")
                if b.workload in NORMS and (pct or 0.0) < FLOOR:
                    verdicts.append(f"{b.workload} {case}: {f'{pct:.0%}' if pct else 'no'} of the floor, "
                                    f"under {FLOOR:.0%}")
            g = geomean([r for r, _ in comparison.per_case.values()])
            rows.append(f"| {b.workload} | geomean | | | | | | {g:.3f}x | |")
            if g < GEOMEAN:
                verdicts.append(f"{b.workload}: geomean {g:.3f}x, under {GEOMEAN:.2f}x")
    print("\n".join(rows))
    print("\n".join(["", "bars missed:" if verdicts else "every bar met"] + [f"- {v}" for v in verdicts]))
    return 1 if verdicts else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=Path, default=ROOT / "benchmarks" / "unseen_shapes.toml")
    p.add_argument("--workloads", default="", help="comma-separated (default: every workload the file names)")
    p.add_argument("--out", type=Path, help="where each workload's bench JSON goes")
    p.add_argument("--budget", type=int, default=300, help="attempts per workload")
    p.add_argument("--time-budget", type=float, default=420, help="seconds of search per workload")
    p.add_argument("--summarize", type=Path, nargs="+", help="only read these bench JSON files")
    p.add_argument("--bench-args", default="", help="more arguments for each bench, e.g. \"--no-tracking\"")
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize)
    if args.out is None:
        p.error("--out DIR is needed to bench (or --summarize FILES to read)")
    names = [n for n in args.workloads.split(",") if n] or list(load_shapes(args.shapes))
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    paths = [bench(n, args.shapes.resolve(), args.out, args.budget, args.time_budget, args.bench_args.split())
             for n in names]
    return summarize(paths)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
