"""Ten KernelBench level-1 problems, imported from a KernelBench checkout with a starting
kernel each (examples/kernelbench/), evaluated on the GPU beside the problem's own Model in
PyTorch eager and torch.compile, one line per problem; then one of them tuned with
`warpsmith bench`. Needs a GPU and PyTorch.

    python3 benchmarks/kernelbench_eval.py KERNELBENCH_CHECKOUT [--only 19_ReLU,23_Softmax]
                                           [--no-compile] [--tune 4_Matrix_vector_multiplication_]
                                           [--time-budget 60] [--keep DIR]

KERNELBENCH_CHECKOUT holds KernelBench/level1/*.py. Each line gives the kernel's median on
the problem's own sizes, the fastest baseline's and the speed-up against it; a kernel that
fails a check prints its status and detail instead. --tune '' skips the bench.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from warpsmith.agent.evaluate.evaluator import Evaluator
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.protocol import TimingConfig

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "examples" / "kernelbench"


@dataclass(frozen=True)
class Problem:
    stem: str  # KernelBench/level1/<stem>.py
    kernel: str  # relative to examples/kernelbench
    grid: str
    block: str


# matmul, matrix-vector, activation, softmax, two norms, pooling, two reductions, convolution:
# the starting kernels of examples/kernelbench/ where the problem's arguments match theirs.
PROBLEMS = (
    Problem("1_Square_matrix_multiplication_", "level1/square_matmul.cu", "ceil_div(N, 64),ceil_div(N, 64)", "16,16"),
    Problem("4_Matrix_vector_multiplication_", "matvec.cu", "ceil_div(M, WARPS)", "WARPS * 32"),
    Problem("19_ReLU", "level1/relu.cu", "ceil_div(batch_size * dim, 1024)", "256"),
    Problem("23_Softmax", "softmax.cu", "batch_size", "256"),
    Problem("36_RMSNorm_", "level1/rmsnorm_channels.cu", "ceil_div(dim1 * dim2, 256),batch_size", "256"),
    Problem("40_LayerNorm", "level1/layernorm_planes.cu", "batch_size", "1024"),
    Problem("42_Max_Pooling_2D", "maxpool2d.cu", "ceil_div(width - 1, 32),ceil_div(height - 1, 8),batch_size * channels",
            "32,8"),
    Problem("47_Sum_reduction_over_a_dimension", "sum_dim.cu", "ceil_div(dim2, 256),batch_size", "256"),
    Problem("51_Argmax_over_a_dimension", "argmax.cu", "ceil_div(dim2, 256),batch_size", "256"),
    Problem("63_conv_standard_2D__square_input__square_kernel", "conv2d.cu",
            "ceil_div(width - 2, 32),ceil_div(height - 2, 8),batch_size * out_channels", "32,8"),
)


def warpsmith(args: list[str], timeout: float) -> tuple[int, str]:
    try:
        done = subprocess.run([sys.executable, "-m", "warpsmith.tui.cli", *args], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g} s"
    return done.returncode, done.stdout + done.stderr


def import_problem(checkout: Path, p: Problem, out: Path) -> Path:
    target = out / p.stem
    rc, text = warpsmith(["import", str(checkout / "KernelBench" / "level1" / f"{p.stem}.py"), str(target),
                          "--kernel", str(KERNELS / p.kernel), "--grid", p.grid, "--block", p.block], 600)
    if rc != 0:
        raise RuntimeError(f"import exited {rc}: {text.strip().splitlines()[-1] if text.strip() else ''}")
    return target


def evaluate(target: Path, compile_too: bool) -> tuple[bool, str]:
    """Whether the starting kernel passed every check, and one line: its median on the
    problem's sizes against the fastest of the baselines timed, or why it is not ok."""
    w = load_workload(target)
    with Evaluator(w, EvaluationOptions(TimingConfig(warmup=5, repetitions=30))) as ev:
        r = ev.evaluate(Candidate.from_spec(w.start_kernel))
        if not r.ok:
            return False, f"kernel {r.status}: {r.detail.splitlines()[0] if r.detail else ''}"
        ours = r.score_ms  # the geomean over the performance cases, as the baselines' score_ms
        if ours is None:
            return False, "kernel ok but no performance case was timed"
        libs: dict[str, float] = {}
        for kind in ev.baseline_kinds():
            if kind == "torch_compile" and not compile_too:
                continue
            b = ev.baseline(kind=kind)
            libs[kind] = b.score_ms if b is not None and b.ok and b.score_ms else float("nan")
    timed = {k: v for k, v in libs.items() if v == v}
    if not timed:
        return True, f"kernel {ours:.4f} ms; no baseline ran ({', '.join(libs) or 'none'})"
    kind = min(timed, key=lambda k: timed[k])
    others = ", ".join(f"{k} {v:.4f}" for k, v in libs.items() if k != kind)
    return True, (f"kernel {ours:.4f} ms, {kind} {timed[kind]:.4f} ms: {timed[kind] / ours:.3f}x"
            + (f" ({others})" if others else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--only", default="", help="comma-separated problem stems (default: all ten)")
    ap.add_argument("--no-compile", action="store_true", help="time PyTorch eager only (torch.compile compiles per shape)")
    ap.add_argument("--tune", default="4_Matrix_vector_multiplication_", help="the problem `warpsmith bench` tunes")
    ap.add_argument("--time-budget", type=float, default=60.0, help="seconds of tuning")
    ap.add_argument("--keep", type=Path, help="write the workloads here and keep them")
    args = ap.parse_args()
    wanted = {s for s in args.only.split(",") if s}
    problems = [p for p in PROBLEMS if not wanted or p.stem in wanted]
    if unknown := (wanted | ({args.tune} if args.tune else set())) - {p.stem for p in PROBLEMS}:
        ap.error(f"not among the ten: {', '.join(sorted(unknown))}")
    if not (args.checkout / "KernelBench" / "level1").is_dir():
        print(f"no KernelBench/level1/ under {args.checkout}", file=sys.stderr)
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        for p in problems:
            try:
                ok, line = evaluate(import_problem(args.checkout, p, out), not args.no_compile)
            except Exception as e:  # one problem's failure is its line, not the end of the table
                ok, line = False, f"error: {type(e).__name__}: {e}"
            failed += not ok
            print(f"{p.stem[:44]:<44} {line}", flush=True)
        if args.tune:
            target = out / args.tune
            if not target.is_dir():
                target = import_problem(args.checkout, next(p for p in PROBLEMS if p.stem == args.tune), out)
            rc, text = warpsmith(["bench", str(target), "--time-budget", str(args.time_budget), "--no-tracking",
                                  "--store", str(out / "mlruns")], args.time_budget + 900)
            print(f"\n$ warpsmith bench {args.tune} --time-budget {args.time_budget:g} (exit {rc})\n{text.strip()}")
            failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
