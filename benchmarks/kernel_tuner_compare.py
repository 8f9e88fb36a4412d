"""warpsmith's tuner against its peer, Kernel Tuner:
the same kernel, the same knob space and the same case, each tool given the same
wall time; then both tools' best configurations timed again by warpsmith's evaluator
beside cuBLAS, so the "best" column compares like with like.

    python benchmarks/kernel_tuner_compare.py [examples/sgemm] [--kernel warptile]
        [--case square-4096] [--time-budget 60] [--strategy genetic_algorithm]

Kernel Tuner (kernel_tuner 1.5.0, cupy backend) is not a dependency of warpsmith: put
its wheels on PYTHONPATH (pip install --no-deps --target DIR, see docs/performance.md).

What each tool searches and how it times:
- The knobs are the kernel's `// knob NAME: v1 v2 ...` comments; the `#if ... #error`
  pairs of its source become Kernel Tuner restrictions (evaluated here, over the
  knobs and the source's object-like macros), so it never compiles a config the
  compiler would refuse. warpsmith's tuner compiles such configs and counts them as
  compile_failed attempts.
- Kernel Tuner's launch grid and block are the workload's expressions, evaluated per
  configuration; its block size is a derived parameter pinned by a restriction.
- Kernel Tuner checks each configuration once against the workload's reference (same
  inputs and rule as warpsmith: |out - ref| <= rtol * (|ref| + rms(ref))) and times
  `iterations` launches (default 7), each between its own CUDA events, with no
  warm-up and no L2 flush, reporting the mean. warpsmith validates on every
  correctness case too, and times 10 warm-up + up to 100 launches with a flush of
  L2 before each, reporting the median. Hence the column timed by warpsmith.
- The wall time of each is measured around the whole tool, start-up included
  (warpsmith: a `warpsmith run` process, its GPU worker, references and cuBLAS).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from warpsmith.agent.spec.knob_space import KnobSpace
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import KernelSpec, Workload

# ---- Kernel Tuner's view of a workload kernel -----------------------------------

BLOCK_NAMES = ("block_size_x", "block_size_y", "block_size_z")


@dataclass(frozen=True)
class PeerProblem:
    """tune_kernel's arguments that follow from the workload: tune_params (the knobs plus
    the block size, derived), the restriction, and the grid per configuration."""

    space: KnobSpace
    kernel: KernelSpec
    sizes: dict[str, int]
    tune_params: dict[str, list[int]] = field(default_factory=dict)

    @staticmethod
    def build(kernel: KernelSpec, sizes: Mapping[str, int]) -> "PeerProblem":
        if kernel.program is not None and len(kernel.program.steps) > 1:
            raise SystemExit(f"{kernel.name} is a program of several launches: Kernel Tuner tunes one kernel launch")
        space = KnobSpace.from_source(kernel.source())
        params: dict[str, list[int]] = {k: list(v) for k, v in space.knobs.items()}
        blocks = [PeerProblem._block(kernel, c) for c in space.configurations()]
        for i, name in enumerate(BLOCK_NAMES):
            params[name] = sorted({b[i] for b in blocks})
        return PeerProblem(space, kernel, dict(sizes), params)

    @staticmethod
    def _block(kernel: KernelSpec, knobs: Mapping[str, int]) -> tuple[int, int, int]:
        return tuple(e.evaluate_int(knobs) for e in kernel.launch.block)  # type: ignore[return-value]

    def knobs_of(self, params: Mapping[str, int]) -> dict[str, int]:
        return {k: int(params[k]) for k in self.space.knobs}

    def restriction(self, params: Mapping[str, int]) -> bool:
        knobs = self.knobs_of(params)
        block = tuple(int(params[n]) for n in BLOCK_NAMES)
        return self.space.allows(knobs) and block == self._block(self.kernel, knobs)

    def grid(self, params: Mapping[str, int]) -> tuple[int, int, int]:
        env = {**self.sizes, **self.knobs_of(params)}
        return tuple(e.evaluate_int(env) for e in self.kernel.launch.grid)  # type: ignore[return-value]

    def shared_bytes(self, params: Mapping[str, int]) -> int:
        return self.kernel.launch.shared.evaluate_int({**self.sizes, **self.knobs_of(params)})


def same_rule(rtol: float, answer: Sequence[Optional[np.ndarray]]) -> Callable[..., bool]:
    """Kernel Tuner's `verify` with warpsmith's rule: |out - ref| <= rtol * (|ref| + rms(ref));
    each expected output's bound is computed once, not per configuration."""
    bounds = [None if a is None else rtol * (np.abs(a) + np.sqrt(np.mean(np.square(a, dtype=np.float64))))
              for a in answer]

    def verify(expected: Sequence[Optional[np.ndarray]], result: Sequence[np.ndarray], atol: Optional[float] = None) -> bool:
        for ref, got, bound in zip(expected, result, bounds):
            if ref is not None and not np.all(np.abs(np.asarray(got, dtype=np.float64) - ref) <= bound):  # NaN fails
                return False
        return True
    return verify


# ---- the table --------------------------------------------------------------------

@dataclass(frozen=True)
class ToolRun:
    """What one tool did within the budget."""

    tool: str
    evaluated: int  # configurations compiled and run (or refused by the compiler)
    passed: int  # of those, verified and timed (warpsmith: in full or until rejected early)
    wall_s: float
    best: dict[str, int] = field(default_factory=dict)  # knob values of its best
    own_ms: Optional[float] = None  # the best as the tool itself timed it
    common_ms: Optional[float] = None  # the same configuration timed by warpsmith's evaluator
    note: str = ""


def render(runs: Sequence[ToolRun], case: str, flops: Optional[float], baseline_ms: Optional[float],
           baseline: str = "cuBLAS") -> str:
    head = ["tool", "candidates evaluated (passed)", "wall s", "candidates / min", "best config",
            "best ms (own timing)", "best ms (warpsmith, cold L2)", "TFLOP/s", f"vs {baseline}"]
    lines = [f"case {case}" + (f"; {baseline} {baseline_ms:.4f} ms (warpsmith's timing)" if baseline_ms else ""),
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        rate = f"{r.evaluated / r.wall_s * 60:.1f}" if r.wall_s > 0 else "-"
        config = " ".join(f"{k}={v}" for k, v in r.best.items()) or "-"
        ms = r.common_ms
        cells = [r.tool, f"{r.evaluated} ({r.passed})", f"{r.wall_s:.1f}", rate, config,
                 f"{r.own_ms:.4f}" if r.own_ms else "-", f"{ms:.4f}" if ms else "-",
                 f"{flops / (ms * 1e-3) / 1e12:.2f}" if ms and flops else "-",
                 f"{baseline_ms / ms:.2f}x" if ms and baseline_ms else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"{r.tool}: {r.note}" for r in runs if r.note]
    return "\n".join(lines)


# ---- running the tools --------------------------------------------------------------

@dataclass(frozen=True)
class CompareOptions:
    workload: Path
    kernel: str
    case: str
    time_budget_s: float
    strategy: str
    iterations: int
    seed: int
    tools: tuple[str, ...]


def parse_args(argv: Sequence[str]) -> CompareOptions:
    p = argparse.ArgumentParser(description="warpsmith's tuner against Kernel Tuner on one kernel and case")
    p.add_argument("workload", type=Path, nargs="?", default=Path("examples/sgemm"))
    p.add_argument("--kernel", default="warptile", help="a [kernels.NAME] of the workload with knobs")
    p.add_argument("--case", default="square-4096", help="the performance case both tools tune for")
    p.add_argument("--time-budget", type=float, default=60.0, metavar="S", help="seconds each tool may search")
    p.add_argument("--strategy", default="genetic_algorithm",
                   help="Kernel Tuner's strategy (random_sample and genetic_algorithm need no scipy)")
    p.add_argument("--iterations", type=int, default=7, help="Kernel Tuner's launches timed per configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("kernel_tuner", "warpsmith"), help="run one tool (both are timed again anyway)")
    a = p.parse_args(argv)
    if a.time_budget <= 0:
        p.error("--time-budget must be positive")
    tools = (a.only,) if a.only else ("kernel_tuner", "warpsmith")
    return CompareOptions(a.workload, a.kernel, a.case, a.time_budget, a.strategy, a.iterations, a.seed, tools)


def _arguments(w: Workload, case) -> tuple[list, list, float]:
    """Kernel arguments in the workload's order, the expected outputs, and the rtol:
    the inputs warpsmith's evaluator draws for the case, and its cached float64 reference
    (computed here once, outside both tools' wall time, and reused by `warpsmith run`)."""
    from warpsmith.agent.evaluate.evaluator import DEFAULT_SEED as seed
    from warpsmith.agent.spec.inputs import generate_inputs
    from warpsmith.agent.spec.references import ensure_reference, load_reference
    from warpsmith.agent.spec.tolerance import case_rtol
    inputs = generate_inputs(w, case, seed)
    reference = load_reference(ensure_reference(w, case, seed))
    args, answer, rtols = [], [], []
    for prm in w.params:
        if prm.role == "scalar":
            kind, value = prm.arg(case)
            args.append({"i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}[kind](value))
            answer.append(None)
        elif prm.role == "input":
            args.append(inputs[prm.name])
            answer.append(None)
        else:
            shape = tuple(e.evaluate_int(case.sizes) for e in prm.shape)
            args.append(np.zeros(shape, dtype=prm.dtype))
            answer.append(reference[prm.name])  # float64, as warpsmith compares
            rtols.append(case_rtol(w, case, prm.dtype))
    return args, answer, max(rtols or [0.0])


def run_kernel_tuner(w: Workload, o: CompareOptions) -> ToolRun:
    import kernel_tuner
    case = next(c for c in w.cases if c.name == o.case)
    problem = PeerProblem.build(w.kernels[o.kernel], case.sizes)
    args, answer, rtol = _arguments(w, case)
    t0 = time.perf_counter()
    try:
        results, _env = kernel_tuner.tune_kernel(
            problem.kernel.entry, problem.kernel.source(), problem.grid, args, problem.tune_params,
            grid_div_x=[], grid_div_y=[], grid_div_z=[], restrictions=problem.restriction,
            smem_args={"size": problem.shared_bytes},
            answer=answer, verify=same_rule(rtol, answer), lang="cupy", compiler_options=["--std=c++17", *problem.kernel.options],
            iterations=o.iterations, strategy=o.strategy, strategy_options=_strategy_options(o), seed=o.seed, quiet=True)
    except Exception as e:  # a failed verification ends Kernel Tuner's whole run: say so in the table
        return ToolRun("Kernel Tuner", 0, 0, time.perf_counter() - t0, note=f"{type(e).__name__}: {str(e)[:200]}")
    wall = time.perf_counter() - t0
    return summarise_peer(f"Kernel Tuner {kernel_tuner.__version__} ({o.strategy})", results, problem, wall,
                          f"mean of {o.iterations} launches per configuration, hot L2")


def summarise_peer(tool: str, results: Sequence[Mapping], problem: PeerProblem, wall_s: float, note: str) -> ToolRun:
    """Kernel Tuner's result dicts (the parameters, then `time` in ms, or `__error__`) as a row."""
    # a strategy may revisit a configuration (answered from Kernel Tuner's cache): count each once
    unique = {tuple(problem.knobs_of(r).values()): r for r in results}
    timed = [r for r in unique.values() if isinstance(r.get("time"), (int, float)) and "__error__" not in r]
    best = min(timed, key=lambda r: r["time"]) if timed else None
    return ToolRun(tool, len(unique), len(timed), wall_s, problem.knobs_of(best) if best else {},
                   best["time"] if best else None, note=note)


def _strategy_options(o: CompareOptions) -> dict:
    options: dict = {"time_limit": o.time_budget_s}
    if o.strategy == "random_sample":
        options["fraction"] = 1.0  # the default (0.1) would stop long before the time budget
    return options


def run_warpsmith(w: Workload, o: CompareOptions) -> ToolRun:
    from warpsmith.agent.evaluate.results import Status
    from warpsmith.agent.loop.session import stored_session
    with tempfile.TemporaryDirectory(prefix="warpsmith-compare-") as store:
        command = [sys.executable, "-P", "-m", "warpsmith.tui", "run", str(o.workload), "--proposer", "tune", "--kernel", o.kernel,
                   "--cases", o.case, "--time-budget", str(o.time_budget_s), "--budget", "100000",
                   "--seed", str(o.seed), "--headless", "--no-tracking", "--store", store]
        t0 = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=_without_kernel_tuner_path(os.environ))
        wall = time.perf_counter() - t0
        sessions = sorted((Path(store) / "sessions").glob("*"))
        if done.returncode != 0 or not sessions:
            return ToolRun("warpsmith tune", 0, 0, wall, note=f"exit {done.returncode}: {done.stdout.strip()[-300:]}")
        state = stored_session(Path(store), sessions[0].name)[1]
    tuned = [a for a in state.get("history", []) if a.proposer == "tune"]  # not the starting kernel
    best = state.get("best")
    if best is not None and best.spec.entry != w.kernels[o.kernel].entry:  # nothing beat the starting kernel
        best = None
    counts: dict[str, int] = {}
    for a in tuned:
        counts[str(a.status)] = counts.get(str(a.status), 0) + 1
    # Passed: verified on every case and timed, in full (ok) or until the early-rejection
    # screen showed it slower than the best (rejected_early): both ran, as Kernel Tuner's do.
    passed = sum(a.status in (Status.OK, Status.REJECTED_EARLY) for a in tuned)
    return ToolRun("warpsmith tune", len(tuned), passed, wall,
                   dict(best.spec.defines) if best else {}, best.score_ms if best else None,
                   note="median of up to 100 launches after 10 warm-up, L2 flushed before each; attempts by status: "
                        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def _without_kernel_tuner_path(env: Mapping[str, str]) -> dict[str, str]:
    """The environment minus the PYTHONPATH entry that holds Kernel Tuner's wheels: its
    newer jsonschema, attrs, packaging... would shadow warpsmith's own in `warpsmith run`."""
    spec = importlib.util.find_spec("kernel_tuner")
    if spec is None or spec.origin is None:
        return dict(env)
    root = Path(spec.origin).resolve().parent.parent
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != root]
    return {**env, "PYTHONPATH": os.pathsep.join(kept)}


def time_alike(w: Workload, o: CompareOptions, runs: list[ToolRun]) -> tuple[list[ToolRun], Optional[float]]:
    """Every best configuration and the baseline, timed by one evaluator (one worker, one timing loop)."""
    from dataclasses import replace

    from warpsmith.agent.evaluate.evaluator import Evaluator
    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.spec.candidate import Candidate
    from warpsmith.agent.worker.protocol import TimingConfig
    timed = w.timing_only([o.case])
    with Evaluator(timed, EvaluationOptions(TimingConfig(), kernel_timeout_s=20.0)) as ev:
        base = ev.baseline()
        base_ms = next((c.timing.median_ms for c in base.cases if c.case == o.case and c.timing), None) if base else None
        out = []
        for r in runs:
            if not r.best:
                out.append(r)
                continue
            result = ev.evaluate(Candidate.from_spec(timed.kernels[o.kernel], r.best))
            ms = next((c.timing.median_ms for c in result.cases if c.case == o.case and c.timing), None)
            note = r.note if result.ok else f"{r.note}; its best is {result.status} under warpsmith's checks"
            out.append(replace(r, common_ms=ms if result.ok else None, note=note))
        return out, base_ms


def main(argv: Sequence[str]) -> int:
    o = parse_args(argv)
    w = load_workload(o.workload)
    if o.kernel not in w.kernels:
        raise SystemExit(f"--kernel {o.kernel}: not a kernel of {w.name} (those are: {', '.join(w.kernels)})")
    case = next((c for c in w.cases if c.name == o.case and c.timed), None)
    if case is None:
        raise SystemExit(f"--case {o.case}: not a performance case of {w.name}")
    if "kernel_tuner" in o.tools and importlib.util.find_spec("kernel_tuner") is None:
        raise SystemExit("kernel_tuner is not importable: pip install --no-deps --target DIR its wheels and put DIR "
                         "on PYTHONPATH (docs/performance.md lists them), or pass --only warpsmith")
    runs = []
    if "kernel_tuner" in o.tools:
        runs.append(run_kernel_tuner(w, o))
        import cupy  # Kernel Tuner's allocations, before another process wants the GPU's memory
        cupy.get_default_memory_pool().free_all_blocks()
    if "warpsmith" in o.tools:
        runs.append(run_warpsmith(w, o))
    from warpsmith.agent.worker.process import GpuUnavailable
    try:
        runs, base_ms = time_alike(w, o, runs)
    except GpuUnavailable as e:
        raise SystemExit(f"no usable GPU: {e}. `warpsmith doctor` says what is missing.")
    flops = w.flops.evaluate(case.sizes) if w.flops is not None else None
    print(f"{w.name}/{o.kernel}, time budget {o.time_budget_s:.0f} s per tool")
    print(render(runs, o.case, flops, base_ms, w.baseline.primary or "baseline"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
