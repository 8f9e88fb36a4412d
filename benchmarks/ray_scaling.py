"""How does a tune session scale over the GPUs of one host on the Ray backend?
For each GPU count, `warpsmith run --proposer tune --headless --backend ray --ray-gpus K`
for a wall-time budget, from a fresh store; then one table: attempts, attempts per minute
once searching, that rate over the one-GPU rate (the goal: at least 0.8 K), the best
against the one-GPU best, and how the attempts spread over the GPUs (each attempt names
the GPU it ran on, in MLflow too). Under it, for each run, where the session's time went
(benchmarks/search_speed.py's split of the loop's nodes): the graph takes a step's
results one at a time, so a loop that cannot keep up shows as little time waiting in
validate and much in propose and reflect.

    python3 benchmarks/ray_scaling.py examples/sgemm --gpus 1,2 --time-budget 120
    python3 benchmarks/ray_scaling.py examples/softmax --gpus 1,2,4,8 --kill-after 60
    python3 benchmarks/ray_scaling.py examples/sgemm --gpus 1,2 --stand-in 0.2   # no GPU: a CPU model

--kill-after S kills one GPU actor's process (SIGKILL, `ray::GpuActor`) S seconds into
the run with the most GPUs (a cluster started here, not one at --ray-address): the
attempt it held must come back ``crashed``, the session must go on and finish, and Ray
restarts the actor (attempts after the kill on the same actor say it serves again).

--stand-in SECONDS runs the same session in this process on a local Ray cluster whose
"GPUs" are only a resource count, each actor holding the CPU tests' EvaluatorDouble
(tests/evaluator_double.py) that spends SECONDS per evaluation call: a model of the
loop's own limit, not a GPU measurement; its output says so.

"Attempts per minute once searching" counts from the first attempt's end to the last's:
start-up (Ray, the actors, each worker's resident buffers, the baselines) is paid once
per run, whatever the GPU count, and would hide the scaling of a short run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from search_speed import attempts_of, child_env, warm_references, where_time_went  # noqa: E402  (benchmarks/)

GOAL = 0.8  # of K times the one-GPU rate


@dataclass
class Run:
    gpus: int
    wall_s: float
    attempts: list  # (Attempt, finished at: epoch seconds)
    best_ms: float | None
    started: float
    killed: str = ""  # what --kill-after killed, and when
    statuses: Counter = field(default_factory=Counter)

    @property
    def per_minute(self) -> float | None:
        """Attempts per minute from the first attempt's end to the last's."""
        done = sorted(t for _, t in self.attempts if t is not None)
        if len(done) < 2 or done[-1] <= done[0]:
            return None
        return 60.0 * (len(done) - 1) / (done[-1] - done[0])

    def spread(self) -> str:
        by_gpu = Counter(a.gpu.split(":")[0] if a.gpu else "?" for a, _ in self.attempts)
        return ", ".join(f"{gpu} {n}" for gpu, n in sorted(by_gpu.items()))


def _actor_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "ray::GpuActor"], capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


def _killer(after_s: float, said: list[str], stop: threading.Event) -> threading.Thread:
    """SIGKILL one GPU actor's process `after_s` into the run (the last one started: Ray
    gives no other handle from outside the driver)."""
    def kill():
        if stop.wait(after_s):
            return
        pids = _actor_pids()
        if not pids:
            said.append(f"no ray::GpuActor process at {after_s:.0f} s: nothing killed")
            return
        os.kill(pids[-1], signal.SIGKILL)
        said.append(f"killed ray::GpuActor pid {pids[-1]} (of {len(pids)}) at {after_s:.0f} s")
    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def run_cli(workload: Path, gpus: int, args, run_flags: list[str], kill_after: float | None) -> tuple[Run, Path]:
    store = Path(tempfile.mkdtemp(prefix=f"ray-scaling-{gpus}-"))
    cmd = [sys.executable, "-P", "-m", "warpsmith.tui", "run", str(workload.resolve()), "--proposer", "tune", "--headless",
           "--budget", "1000000", "--time-budget", str(args.time_budget), "--store", str(store),
           "--backend", "ray", "--ray-gpus", str(gpus), *(["--cases", args.cases] if args.cases else []), *run_flags]
    env = child_env()
    said: list[str] = []
    stop = threading.Event()
    t0 = time.time()
    killer = _killer(kill_after, said, stop) if kill_after is not None else None
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    stop.set()
    if killer is not None:
        killer.join()
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{gpus} GPU(s): run failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    attempts, best = attempts_of(store)
    return Run(gpus, wall, attempts, best, t0, "; ".join(said), Counter(str(a.status) for a, _ in attempts)), store


def run_stand_in(workload_dir: Path, gpus: int, args, kill_after: float | None) -> tuple[Run, Path]:
    """The same session in this process, each Ray actor holding the CPU tests' GPU stand-in."""
    sys.path.insert(0, str(ROOT / "tests"))
    import ray
    from evaluator_double import double_factory

    from warpsmith.agent.evaluate.options import EvaluationOptions
    from warpsmith.agent.evaluate.ray_backend import RayBackend
    from warpsmith.agent.evaluate.ray_cluster import init_ray
    from warpsmith.agent.loop.limits import Limits
    from warpsmith.agent.loop.options import SearchOptions
    from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
    from warpsmith.agent.proposers.choice import ProposerChoice
    from warpsmith.agent.proposers.tune import TuneProposer
    from warpsmith.agent.spec.workload import load_workload
    from warpsmith.agent.tracking.tracker import Tracker
    workload = load_workload(workload_dir)
    store = Path(tempfile.mkdtemp(prefix=f"ray-scaling-stand-in-{gpus}-"))
    init_ray(ray, num_cpus=os.cpu_count() or 2, num_gpus=gpus,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}})
    said: list[str] = []
    stop = threading.Event()
    t0 = time.time()
    killer = _killer(kill_after, said, stop) if kill_after is not None else None
    try:
        backend = RayBackend(workload, EvaluationOptions(backend="ray", ray_gpus=gpus),
                             factory=double_factory(delay_s=args.stand_in))
        search = SearchOptions(ProposerChoice(seed=0), 1_000_000, Limits(time_s=args.time_budget), batch=args.batch,
                               cases=tuple(c for c in args.cases.split(",") if c))
        info = SessionInfo("stand-in", str(workload.directory), search)
        tracker = Tracker(store)
        info.mlflow_run_id = tracker.start(workload.name, info.id, {"proposer": "tune"})
        directory = session_dir(store, info.id)
        directory.mkdir(parents=True, exist_ok=True)
        info.save(directory)
        session = Session(info, directory, workload, backend, TuneProposer(0), tracker)
        try:
            session.end(session.run())
        finally:
            session.close()
            backend.close()
    finally:
        stop.set()
        if killer is not None:
            killer.join()
        ray.shutdown()
    attempts, best = attempts_of(store)
    return Run(gpus, time.time() - t0, attempts, best, t0, "; ".join(said),
               Counter(str(a.status) for a, _ in attempts)), store


def table(runs: list[Run]) -> list[str]:
    one = next((r for r in runs if r.gpus == 1), None)
    lines = ["| GPUs | attempts | per minute, searching | x 1 GPU | goal (0.8 K) | best ms | vs 1 GPU | attempts per GPU |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        rate = r.per_minute
        scale = rate / one.per_minute if one and one.per_minute and rate else None
        best = r.best_ms / one.best_ms if one and one.best_ms and r.best_ms else None
        lines.append(f"| {r.gpus} | {len(r.attempts)} | {rate:.1f} | " if rate else f"| {r.gpus} | {len(r.attempts)} | - | ")
        lines[-1] += (f"{scale:.2f}x | {'met' if scale >= GOAL * r.gpus else 'missed'} | " if scale
                      else "- | - | ")
        lines[-1] += (f"{r.best_ms:.4f} | " if r.best_ms else "- | ") + (f"{best:.3f} | " if best else "- | ")
        lines[-1] += f"{r.spread()} |"
    return lines


def kill_report(run: Run, kill_after: float) -> str:
    """What the kill cost (the attempts that came back crashed) and whether every GPU
    served attempts after it (Ray restarted the killed actor)."""
    crashed = [a for a, _ in run.attempts if str(a.status) == "crashed"]
    after = Counter(a.gpu.split(":")[0] for a, t in run.attempts
                    if t is not None and t > run.started + kill_after and str(a.status) != "crashed")
    cost = (f"{len(crashed)} attempt(s) crashed ({crashed[0].detail.splitlines()[0]})" if crashed
            else "no attempt crashed (the actor held none)")
    served = ", ".join(f"{gpu} {n}" for gpu, n in sorted(after.items())) or "none"
    return (f"kill: {run.killed or 'nothing killed'}; {cost}; the session went on to {len(run.attempts)} attempts; "
            f"finished after the kill, by GPU: {served} ({len(after)} of {run.gpus} GPUs serving)")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", type=Path)
    p.add_argument("--gpus", default="1,2", help="the GPU counts to run, comma-separated (default 1,2)")
    p.add_argument("--time-budget", type=float, default=120.0, help="wall seconds per run (default 120)")
    p.add_argument("--cases", default="", help="the performance cases to time (run's --cases)")
    p.add_argument("--batch", type=int, default=4, help="--batch (on K GPUs a step is at least 2 K)")
    p.add_argument("--kill-after", type=float, help="kill one GPU actor this many seconds into the largest run")
    p.add_argument("--stand-in", type=float, metavar="SECONDS",
                   help="no GPU: actors hold the tests' stand-in, SECONDS per evaluation call (a CPU model)")
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    run_flags = argv[split + 1:] + ["--batch", str(args.batch)]
    counts = sorted({int(k) for k in args.gpus.split(",") if k.strip()})
    if not counts or counts[0] < 1:
        p.error("--gpus: one or more GPU counts, each at least 1")
    if args.stand_in is None:
        warm_references(args.workload)
    runs = []
    for k in counts:
        kill = args.kill_after if k == counts[-1] else None
        run, store = (run_stand_in(args.workload, k, args, kill) if args.stand_in is not None
                      else run_cli(args.workload, k, args, run_flags, kill))
        runs.append(run)
        print(f"{k} GPU(s): wall {run.wall_s:.1f} s, attempts {len(run.attempts)} "
              f"({', '.join(f'{s} {n}' for s, n in sorted(run.statuses.items()))})")
        where_time_went(store, run.started, run.wall_s)
        if kill is not None:
            print(kill_report(run, kill))
    what = (f"stand-in GPUs ({args.stand_in:.2f} s per evaluation call, tests/evaluator_double.py): a CPU model"
            if args.stand_in is not None else "Ray backend, one actor per GPU")
    print(f"\n{args.workload.name}{' cases ' + args.cases if args.cases else ''}, {args.time_budget:.0f} s per run, "
          f"{what}")
    print("\n".join(table(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
