"""How fast does a tune session search? Runs `warpsmith run --proposer tune --headless`
for a wall-time budget on a workload and prints the attempts per second, the best after
the budget, and when the session first came within 2% of its final best (or of a
target, e.g. the best a 10-minute session found). With --site, the session runs with
an older install first on PYTHONPATH (before/after, like harness_speed.py); the
session is read back with this checkout's code either way.

    python3 benchmarks/search_speed.py examples/sgemm --cases square-4096 --time-budget 60
    python3 benchmarks/search_speed.py examples/softmax --time-budget 600            # the 10-minute reference
    python3 benchmarks/search_speed.py examples/softmax --time-budget 120 --target-ms 0.2625
    python3 benchmarks/search_speed.py examples/softmax --time-budget 600 --target-ms 0.2625 --stop-at-target
    python3 benchmarks/search_speed.py examples/sgemm --site BEFORE_SITE --time-budget 60   # the old harness
    python3 benchmarks/search_speed.py examples/sgemm -- --batch 8 --no-early-reject       # flags for `run`

A 10-minute session on a machine whose calls last at most 10 minutes runs in two parts,
the second resuming the first (its time budget counts running time, the pause excluded):

    python3 benchmarks/search_speed.py examples/sgemm --time-budget 300 --store /tmp/tenmin
    python3 benchmarks/search_speed.py examples/sgemm --time-budget 600 --store /tmp/tenmin --resume

"running time" lines read the checkpoint's history (each attempt's running seconds, as
the time budget counts them), so they hold across the parts.

The references (float64, every case, both seeds) are computed before the clock starts
unless --cold: a before/after pair then times the search, not whichever run came first.

The target: sgemm --cases square-4096, 60 s, at most 0.38 s per attempt with the same
or a better best (docs/performance.md, "Search speed", has the current figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from early_reject_safety import screen_pairs, session_attempts, slack_text  # noqa: E402  (benchmarks/)

from warpsmith.agent.evaluate.early_reject import replay  # noqa: E402
from warpsmith.agent.spec.timing_policy import MARGIN  # noqa: E402

WITHIN = 0.02


def only_session(store: Path) -> Path:
    """The session directory of a store this script made (one session in it)."""
    return next((store / "sessions").iterdir())


def attempts_of(store: Path) -> tuple[list, float | None]:
    """The session's attempts (the checkpoint's history) with the time each finished (its
    archived candidate's mtime), and the session's final best score."""
    from warpsmith.agent.loop.session import graph_config, open_graph
    session = only_session(store)
    state = open_graph(session).get_state(graph_config(session.name)).values
    finished = []
    for a in state.get("history", []):
        f = session / "attempts" / f"{a.iteration:03d}" / "candidate.json"
        finished.append((a, f.stat().st_mtime if f.exists() else None))
    best = state.get("best")
    return finished, best.score_ms if best else None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", type=Path)
    p.add_argument("--time-budget", type=float, default=60.0)
    p.add_argument("--cases", default="", help="the performance cases to time (run's --cases)")
    p.add_argument("--kernel", default="", help="the kernel to tune (run's --kernel)")
    p.add_argument("--site", default="", help="an older install's site directory, first on PYTHONPATH")
    p.add_argument("--target-ms", type=float, help="report when the session came within 2%% of this score")
    p.add_argument("--profile", type=Path, help="sample the session's threads (benchmarks/sample_profile.py) into this file")
    p.add_argument("--keep", type=Path, help="copy the session's attempt records and timeline (small files) here")
    p.add_argument("--cold", action="store_true",
                   help="leave the references uncomputed: the session computes them inside its wall time")
    p.add_argument("--stop-at-target", action="store_true",
                   help="stop the session (SIGTERM, its stop now) once its best is within 2%% of --target-ms: "
                        "the time to reach a target, without the rest of the budget")
    p.add_argument("--store", type=Path, help="the session's store, kept (default: a new temporary one)")
    p.add_argument("--resume", action="store_true",
                   help="resume the session in --store until --time-budget seconds of running in all")
    # After "--": more flags for `warpsmith run` (split here: argparse would take an
    # empty positional list before the options and then refuse what follows "--").
    split = argv.index("--") if "--" in argv else len(argv)
    args, run_flags = p.parse_args(argv[:split]), argv[split + 1:]
    if args.stop_at_target and not args.target_ms:
        print("--stop-at-target needs --target-ms")
        return 2
    if args.resume and not (args.store and (args.store / "sessions").is_dir()):
        print("--resume needs the --store of an earlier part")
        return 2
    if not args.resume and args.store and (args.store / "sessions").is_dir() and any((args.store / "sessions").iterdir()):
        print(f"{args.store} holds a session already: --resume continues it, or give an empty --store")
        return 2
    if not args.cold:
        warm_references(args.workload)
    store = args.store.resolve() if args.store else Path(tempfile.mkdtemp(prefix="search-speed-"))
    runner = [str(ROOT / "benchmarks" / "sample_profile.py"), str(args.profile.resolve())] if args.profile else ["-m"]
    if args.resume:
        session_name = only_session(store).name
        # The search's own flags (--batch, --no-early-reject...) are the checkpoint's: `resume`
        # takes the evaluation's only.
        cmd = [sys.executable, "-P", *runner, "warpsmith.tui", "resume", session_name, "--headless", "--time-budget",
               str(args.time_budget), "--store", str(store), "--no-tracking", *resume_flags(run_flags)]
    else:
        cmd = [sys.executable, "-P", *runner, "warpsmith.tui", "run", str(args.workload.resolve()), "--proposer", "tune",
               "--headless", "--budget", "1000000", "--time-budget", str(args.time_budget), "--store", str(store),
               "--no-tracking", *(["--cases", args.cases] if args.cases else []),
               *(["--kernel", args.kernel] if args.kernel else []), *run_flags]
    # -P: nothing of the working directory on the child's sys.path.
    env = child_env(args.site)
    t0 = time.time()
    stopped = False
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        while child.poll() is None:
            try:
                child.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                if args.stop_at_target and not stopped and reached_target(store, args.target_ms):
                    child.terminate()  # the session's "stop now": checkpoint kept, best saved
                    stopped = True
        wall = time.time() - t0
        err.seek(0)
        stderr = err.read()
    if child.returncode != 0 and not stopped:
        print(f"run failed (exit {child.returncode}): {stderr.strip()[-500:]}")
        return 1
    attempts, best = attempts_of(store)
    if not attempts or best is None:
        print(f"no attempt or no best in {wall:.0f} s")
        return 1
    target = args.target_ms or best
    if args.resume:  # the first part's attempts finished before this clock: running time only
        here = sum(t is not None and t >= t0 for _, t in attempts)
        print(f"workload {args.workload.name}, resumed {session_name} until {args.time_budget:.0f} s of running, "
              f"this part {here} attempts in {wall:.1f} s of wall time")
    else:
        wall_report(args, run_flags, attempts, best, target, t0, wall, stopped)
    session = only_session(store)
    running_report(session, target)
    where_time_went(store, t0, wall)
    # The rule judged each attempt on its screen; replayed on the full timings' own first
    # launches (other samples than the ones it was judged on), it must cut no winner.
    print(f"early rejection replayed on this session's full timings: {replay(session_attempts(session)).text()}; "
          f"{slack_text(screen_pairs(session), MARGIN)}")
    if args.keep:
        keep_records(session, args.keep)
    return 0


def wall_report(args: argparse.Namespace, run_flags: list[str], attempts: list, best: float, target: float,
                t0: float, wall: float, stopped: bool) -> None:
    """A fresh session's lines by wall time from the command's start (each attempt's finish:
    its archived candidate's mtime)."""
    first_done = min(t for _, t in attempts if t is not None)
    last_done = max(t for _, t in attempts if t is not None)
    searching = max(1e-9, last_done - t0)
    reached = next((t - t0 for a, t in attempts if t is not None and a.score_ms and a.score_ms <= target * (1 + WITHIN)),
                   None)
    statuses: dict[str, int] = {}
    for a, _ in attempts:
        statuses[str(a.status)] = statuses.get(str(a.status), 0) + 1
    print(f"workload {args.workload.name}{' cases ' + args.cases if args.cases else ''}, "
          f"{'site ' + args.site if args.site else 'this checkout'}{', run ' + ' '.join(run_flags) if run_flags else ''}, "
          f"time budget {args.time_budget:.0f} s, wall {wall:.1f} s{', stopped at the target' if stopped else ''}")
    print(f"attempts {len(attempts)} ({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}); "
          f"first finished at {first_done - t0:.1f} s")
    print(f"throughput: {len(attempts) / searching:.2f} attempts/s, {searching / len(attempts):.3f} s per attempt "
          f"(from the command's start to the last attempt)")
    print(f"best after {args.time_budget:.0f} s: {best:.4f} ms")
    print(f"first within {WITHIN:.0%} of {'the target ' if args.target_ms else 'its final best '}{target:.4f} ms: "
          + (f"{reached:.1f} s" if reached is not None else "never"))


RESUME_FLAGS = {"--backend": 1, "--ray-address": 1, "--ray-gpus": 1, "--hot": 0, "--timeout": 1, "--device": 1,
                "--reference-timeout": 1}  # flag: how many values follow it


def resume_flags(run_flags: list[str]) -> list[str]:
    """The flags for `run` that `resume` takes too (the evaluation's), with their values."""
    kept, i = [], 0
    while i < len(run_flags):
        flag = run_flags[i].split("=", 1)[0]
        width = 0 if "=" in run_flags[i] else RESUME_FLAGS.get(flag, 0)
        if flag in RESUME_FLAGS:
            kept += run_flags[i:i + 1 + width]
        i += 1 + width
    return kept


def reached_target(store: Path, target_ms: float) -> bool:
    """Whether the session being run has a best within 2% of the target (its checkpoint,
    read while the session writes it: SQLite in WAL mode lets a reader in)."""
    import sqlite3
    from contextlib import closing

    from warpsmith.agent.loop.session import graph_config, open_graph
    try:
        session = only_session(store)
        # read-only: a checkpoint not created yet stays the session's to create
        with closing(sqlite3.connect(f"file:{session / 'checkpoint.sqlite'}?mode=ro", uri=True,
                                     check_same_thread=False)) as conn:
            best = open_graph(session, conn).get_state(graph_config(session.name)).values.get("best")
    except Exception:  # not started yet, or a checkpoint mid-creation: ask again later
        return False
    return best is not None and best.score_ms <= target_ms * (1 + WITHIN)


def running_progress(session: Path) -> list[tuple[int, float, float | None]]:
    """(attempts so far, running seconds as the time budget counts them, best score) after
    each attempt, from the checkpoint's history (the reflect node writes the history and
    the time spent together): a pause between a run and its resume is not running time."""
    from warpsmith.agent.loop.session import graph_config, open_graph
    after: dict[int, tuple[float, float | None]] = {}
    for snapshot in open_graph(session).get_state_history(graph_config(session.name)):
        values = snapshot.values
        n, spent = len(values.get("history", [])), values.get("spent")
        if n and spent is not None and n not in after:
            best = values.get("best")
            after[n] = (spent.elapsed_s, best.score_ms if best else None)
    return [(n, *after[n]) for n in sorted(after)]


def running_report(session: Path, target: float) -> None:
    progress = running_progress(session)
    if not progress:
        return
    attempts, running, best = progress[-1]
    if best is None:
        print(f"running time: {attempts} attempts in {running:.1f} s, no best")
        return
    reached = next((s for _, s, b in progress if b is not None and b <= target * (1 + WITHIN)), None)
    print(f"running time: {attempts} attempts in {running:.1f} s, {running / attempts:.3f} s per attempt; best "
          f"{best:.4f} ms; first within {WITHIN:.0%} of {target:.4f} ms after "
          + (f"{reached:.1f} s of running" if reached is not None else "never"))


def child_env(site: str = "") -> dict[str, str]:
    """The environment of a `warpsmith` child run with -P: `site` (an older install) first on
    PYTHONPATH, then what was there."""
    paths = [site] if site else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)}


def keep_records(session: Path, to: Path) -> None:
    """The attempts' small records (samples, verdicts) and the timeline, for replays later
    (benchmarks/early_reject_safety.py reads a store of sessions/<name>/attempts/...)."""
    import shutil
    dest = to / "sessions" / session.name
    for f in [session / "timeline.jsonl", *session.glob("attempts/*/samples.json"),
              *session.glob("attempts/*/attempt.json")]:
        if f.exists():
            (dest / f.parent.relative_to(session)).mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / f.relative_to(session))


def warm_references(workload_dir: Path) -> None:
    """Every case's float64 references for the seeds a session uses, before the clock
    starts: so that a before/after pair does not time whichever run computed them first
    (the reference cache is shared; its key is the workload's files and the seed)."""
    from warpsmith.agent.evaluate.evaluator import DEFAULT_SEED, FRESH_SEED
    from warpsmith.agent.spec.references import ensure_reference
    from warpsmith.agent.spec.workload import load_workload
    w = load_workload(workload_dir)
    t0 = time.time()
    for case in w.cases:
        for seed in (DEFAULT_SEED, FRESH_SEED):
            ensure_reference(w, case, seed)
    print(f"references of {len(w.cases)} cases x 2 seeds ready before the clock ({time.time() - t0:.1f} s)")


def where_time_went(store: Path, t0: float, wall: float) -> None:
    """This run's part of the session's timeline (agent/loop/timeline.py) split by loop
    node: seconds spent in each (from its NodeStarted to its NodeFinished), and the
    start-up before the first event."""
    from warpsmith.agent.loop.timeline import read_timeline
    # this run's (a resumed session's timeline holds the earlier parts too)
    records = [r for r in read_timeline(only_session(store)) if r["t"] >= t0]
    if not records:
        print("no timeline (an older install writes none)")
        return
    spent: dict[str, float] = {}
    counts: dict[str, int] = {}
    open_at: dict[str, float] = {}
    for r in records:
        if r["event"] == "NodeStarted":
            open_at[r["node"]] = r["t"]
        elif r["event"] == "NodeFinished" and r["node"] in open_at:
            node = r["node"]
            spent[node] = spent.get(node, 0.0) + r["t"] - open_at.pop(node)
            counts[node] = counts.get(node, 0) + 1
    compiles = [r for r in records if r["event"] == "CompileFinished"]
    if compiles:
        hits = sum(bool(r.get("cached")) for r in compiles)
        print(f"attempts' compiles: {hits} of {len(compiles)} from the cache (compiled ahead); the others compiled "
              f"{sum(r.get('compile_ms', 0) for r in compiles if not r.get('cached')) / 1000:.1f} s while the GPU waited")
    worker: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r["event"] == "CaseFinished" and r.get("elapsed_ms") is not None:
            worker.setdefault((r["case"], r["phase"]), []).append(r["elapsed_ms"])
    if worker:  # the worker's own time per case and phase (setup, launches, checks), most first
        rows = sorted(worker.items(), key=lambda kv: -sum(kv[1]))
        print("worker time by case: " + "; ".join(f"{case} {phase} {sum(v) / 1000:.1f} s ({len(v)}x, "
                                                  f"{sum(v) / len(v):.0f} ms each)" for (case, phase), v in rows[:8])
              + f"; all cases {sum(sum(v) for v in worker.values()) / 1000:.1f} s")
        phases: dict[str, float] = {}
        for (_, phase), v in worker.items():
            phases[phase] = phases.get(phase, 0.0) + sum(v)
        print("worker time by phase: " + "; ".join(f"{p} {t / 1000:.1f} s" for p, t in
                                                   sorted(phases.items(), key=lambda kv: -kv[1])))
    evaluator_share(records)
    first = records[0]["t"] - t0
    accounted = first + sum(spent.values())
    print(f"where the {wall:.1f} s went: start-up before the first event {first:.1f} s; "
          + "; ".join(f"{n} {spent[n]:.1f} s ({counts[n]}x, {1000 * spent[n] / counts[n]:.0f} ms each)"
                      for n in sorted(spent, key=spent.get, reverse=True))
          + f"; between nodes and after the last {wall - accounted:.1f} s")


def evaluator_share(records: list[dict]) -> None:
    """How busy the evaluator was with the attempts (the timeline's EvaluatorRan events:
    each attempt's validation and timing, their start and length, wherever they ran, ahead
    of the graph or not), what of that was the worker's cases, and what the Ray hop added
    per attempt. Re-timings and baselines are not attempts: the GPU side was busier than
    this says, never idler."""
    runs = [r for r in records if r["event"] == "EvaluatorRan" and r.get("began_s") and r.get("evaluator_ms")]
    if not runs:
        return
    spans = sorted((r["began_s"], r["began_s"] + r["evaluator_ms"] / 1000) for r in runs)
    busy, end = 0.0, spans[0][0]
    for a, b in spans:  # the union: attempts on several GPUs may overlap
        busy += max(0.0, b - max(a, end))
        end = max(end, b)
    window = max(1e-9, end - spans[0][0])
    iterations = {r["iteration"] for r in runs}
    # The attempt's own cases only: reflect's fresh-seed validation and re-timings, and
    # conclude's, stream case events under the attempt's iteration too.
    cases, node = 0.0, ""
    for r in records:
        if r["event"] == "NodeStarted":
            node = r["node"]
        elif r["event"] == "CaseFinished" and node == "evaluate" and r.get("elapsed_ms") is not None \
                and r.get("iteration") in iterations:
            cases += r["elapsed_ms"]
    evaluator = sum(r["evaluator_ms"] for r in runs)
    line = (f"evaluator: busy with attempts {busy:.1f} s of the {window:.1f} s from the first to the last ({busy / window:.0%}); "
            f"per attempt {evaluator / len(iterations):.0f} ms, of which the worker's cases {cases / len(iterations):.0f} ms")
    # Ray: one call per attempt, its wait on the validation's record
    called = {r["iteration"] for r in runs if r.get("call_ms")}
    if called:
        hop = sum(r.get("call_ms", 0.0) - r["evaluator_ms"] for r in runs if r["iteration"] in called)
        line += f"; the Ray hop {hop / len(called):.1f} ms per attempt over the evaluator's own"
    print(line)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
