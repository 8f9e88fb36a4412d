"""Does the Ray backend cost anything on one GPU? The same candidates, in the same order,
with the same early-rejection inputs, through the local evaluator and through Ray's one
GPU actor, the kernels compiled beforehand: the wall time per attempt of each, and
whether both gave each candidate the same verdict (the target: on one GPU, Ray's time
per attempt within 10% of local's).

Two tune sessions, one per backend, never propose the same candidates: which
neighbours a step takes depends on every timing before it, so a session pair's
attempts-per-second differ by the search path as well as by the backend (on one H100,
two pairs gave Ray 0.7% faster and 14.5% slower). A replay holds the path fixed.

    python3 benchmarks/search_speed.py examples/sgemm --cases square-4096 --keep RECORDS -- --batch 4
    python3 benchmarks/backend_replay.py examples/sgemm --cases square-4096 --records RECORDS \\
        --write-sequence sequence.json
    python3 benchmarks/backend_replay.py examples/sgemm --cases square-4096 --sequence sequence.json

The sequence is each GPU-reaching attempt of a recorded `tune` session (a kernel of the
workload and its knob values: another proposer's edited source is not in the records):
its kernel, knob values, and the best score (and each performance case's fastest median)
the graph had when it evaluated it, which is what the early-rejection screen compares
with (an attempt with no samples kept, e.g. one wrong at validation, gets the step
before's). Each attempt is run as the loop runs it, one job (run_attempt: the screen,
the validation, then, when it passed, the timing). The backends take turns in ABBA order
(local, ray, ray, local, ... `--rounds` each), each opened fresh, its GPU side started by
one untimed evaluation and every kernel compiled (the compile cache), so that evaluation
is timed, not NVRTC.

The session's NVRTC still runs meanwhile: a tune session keeps a compile process per
spare core busy compiling ahead (at niceness 10), and the GPU worker competes with them
for the CPU. `--compile-load N` (default: the tuner's number, cores - 2) keeps N such
compiles going through both backends' passes (the sequence's kernels, uncached); 0 times
an idle machine, which hides any priority difference between the local worker and a Ray
actor's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from warpsmith.agent.evaluate.records import legacy_identity  # noqa: E402
from warpsmith.agent.worker.status import Status  # noqa: E402

BAR = 0.10  # Ray's time per attempt at most 10% above the local one's
# every verdict but those given before the GPU (compile, launch rule, the proposer's answer)
REACHED_GPU = set(Status) - {Status.COMPILE_FAILED, Status.LAUNCH_INVALID, Status.PROPOSAL_INVALID}


@dataclass(frozen=True)
class Step:
    """One attempt to replay: the kernel (a workload kernel's name) and its knob values,
    the early-rejection inputs the session gave it, and the verdict it got there."""

    kernel: str
    defines: dict[str, int]
    best_ms: float | None
    case_best_ms: dict[str, float] | None
    recorded: str


@dataclass
class Pass:
    """One backend's run over the whole sequence."""

    backend: str
    seconds: list[float] = field(default_factory=list)  # wall time of each attempt
    verdicts: list[str] = field(default_factory=list)
    compiles: int = 0  # NVRTC compiles the load finished during the pass

    @property
    def per_attempt_ms(self) -> float:
        return 1000.0 * sum(self.seconds) / len(self.seconds)


def read_records(records: Path) -> list[Step]:
    """The sequence of the one session under `records` (a store or search_speed.py's
    --keep folder: sessions/<id>/attempts/NNN/{attempt,samples}.json), in iteration order:
    its tune attempts that reached the GPU."""
    sessions = sorted((records / "sessions").iterdir())
    if len(sessions) != 1:
        raise SystemExit(f"backend_replay: {records} holds {len(sessions)} sessions; give a folder with one")
    steps: list[Step] = []
    for attempt_file in sorted(sessions[0].glob("attempts/*/attempt.json"), key=lambda f: int(f.parent.name)):
        attempt = json.loads(attempt_file.read_text())
        if attempt.get("status") not in REACHED_GPU or attempt.get("proposer") != "tune":
            continue
        samples_file = attempt_file.with_name("samples.json")
        samples = json.loads(samples_file.read_text()) if samples_file.exists() else {}
        before = steps[-1] if steps else None  # no samples kept: the bests of the step before
        best_ms = samples.get("best_ms", before.best_ms if before else None)
        case_best = samples.get("case_best_ms", before.case_best_ms if before else None)
        steps.append(Step(legacy_identity(attempt)["kernel"], dict(attempt.get("defines") or {}), best_ms, case_best,
                          attempt["status"]))
    return steps


def write_sequence(steps: list[Step], path: Path) -> None:
    path.write_text("[\n" + ",\n".join(json.dumps(s.__dict__) for s in steps) + "\n]\n")  # an attempt a line


def read_sequence(path: Path) -> list[Step]:
    return [Step(**s) for s in json.loads(path.read_text())]


def candidates_of(workload, steps: list[Step]) -> list:
    from warpsmith.agent.spec.candidate import Candidate
    unknown = sorted({s.kernel for s in steps} - set(workload.kernels))
    if unknown:
        raise SystemExit(f"backend_replay: {workload.name} has no kernel {', '.join(unknown)} (a sequence of another "
                         "tree's workload?)")
    return [Candidate.from_spec(workload.kernels[s.kernel], s.defines) for s in steps]


class CompileLoad:
    """`threads` compiles kept going (uncached, in the compile processes, as the tuner's
    compile-ahead keeps them) until stopped."""

    def __init__(self, candidates: list, threads: int, arch: str):
        self.candidates, self.threads, self.arch = candidates, threads, arch
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.compiles = 0

    def __enter__(self) -> "CompileLoad":
        from warpsmith.agent.runtime.compiler import compile_kernel

        def loop(offset: int) -> None:
            i = offset
            while not self._stop.is_set():
                c = self.candidates[i % len(self.candidates)]
                compile_kernel(c.source, c.entry, self.arch, c.compile_options(), use_cache=False)
                self.compiles += 1
                i += self.threads
        self._workers = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(self.threads)]
        for w in self._workers:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for w in self._workers:
            w.join()


def run_pass(backend_name: str, workload, candidates: list, steps: list[Step], ray_gpus: int, load: int = 0) -> Pass:
    """Every attempt of the sequence through a fresh backend, one after another, with
    `load` compiles going meanwhile (CompileLoad)."""
    from warpsmith.agent.evaluate.attempt import AttemptJob
    from warpsmith.agent.evaluate.backend_choice import open_backend
    from warpsmith.agent.evaluate.options import EvaluationOptions
    options = EvaluationOptions(backend=backend_name, ray_gpus=ray_gpus if backend_name == "ray" else 0)
    out = Pass(backend_name)
    with tempfile.TemporaryDirectory() as logs:
        backend = open_backend(workload, options, Path(logs))
        try:
            backend.evaluate(candidates[0], time_cases=False, revalidate=False)  # starts the GPU side: untimed
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # the compile cache (warm after the first pass)
                list(pool.map(backend.compile, candidates))
            with CompileLoad(candidates, load, backend.facts.arch) as compiling:
                for candidate, step in zip(candidates, steps):
                    t0 = time.perf_counter()
                    r = backend.run_attempt(AttemptJob(candidate, best_ms=step.best_ms,
                                                       case_best_ms=step.case_best_ms)).verdict
                    out.seconds.append(time.perf_counter() - t0)
                    out.verdicts.append(str(r.status))
            out.compiles = compiling.compiles
        finally:
            backend.close()
    return out


def report(passes: list[Pass], steps: list[Step]) -> list[str]:
    """The table: each backend's median time per attempt over its passes, Ray over local
    against the bar, and how many verdicts agreed."""
    by = {name: [p for p in passes if p.backend == name] for name in ("local", "ray")}
    lines = ["| backend | passes | attempts | ms per attempt (each pass) | median | verdicts |", "|---|---|---|---|---|---|"]
    medians = {}
    for name, runs in by.items():
        if not runs:
            continue
        medians[name] = statistics.median(p.per_attempt_ms for p in runs)
        counts = Counter(runs[0].verdicts)
        lines.append(f"| {name} | {len(runs)} | {len(steps)} | {', '.join(f'{p.per_attempt_ms:.1f}' for p in runs)} | "
                     f"{medians[name]:.1f} | {', '.join(f'{k} {v}' for k, v in counts.most_common())} |")
    if "local" in medians and "ray" in medians:
        ratio = medians["ray"] / medians["local"]
        lines.append(f"Ray over local: {ratio:.3f}x the time per attempt "
                     f"({'within' if ratio <= 1 + BAR else 'past'} the {BAR:.0%} bar)")
    agree = [sum(a == b for a, b in zip(p.verdicts, passes[0].verdicts)) for p in passes[1:]]
    lines.append(f"verdicts as the first pass's: {', '.join(f'{n} of {len(steps)}' for n in agree) or 'one pass'}; "
                 f"as recorded in the session: {sum(a == s.recorded for a, s in zip(passes[0].verdicts, steps))} of "
                 f"{len(steps)} (rejected_early sits at the screen's edge: a re-timing can fall either side)")
    return lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", type=Path)
    p.add_argument("--cases", default="", help="the performance cases the session timed (run's --cases)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--records", type=Path, help="a kept session (search_speed.py --keep)")
    source.add_argument("--sequence", type=Path, help="a sequence written by --write-sequence")
    p.add_argument("--write-sequence", type=Path, help="write the sequence here and stop")
    p.add_argument("--rounds", type=int, default=2, choices=range(1, 21), metavar="1..20",
                   help="passes per backend, in ABBA order")
    p.add_argument("--compile-load", type=int, default=max(1, (os.cpu_count() or 1) - 2), metavar="N",
                   help="compiles kept going during the passes, as a tune session's (0: an idle machine)")
    p.add_argument("--limit", type=int, default=0, help="replay the first N attempts only")
    p.add_argument("--ray-gpus", type=int, default=1)
    args = p.parse_args(argv)

    steps = read_records(args.records) if args.records else read_sequence(args.sequence)
    steps = steps[:args.limit] if args.limit else steps
    if not steps:
        raise SystemExit("backend_replay: the records hold no attempt that reached the GPU")
    if args.write_sequence:
        write_sequence(steps, args.write_sequence)
        print(f"{len(steps)} attempts written to {args.write_sequence}")
        return 0

    from warpsmith.agent.spec.workload import load_workload
    workload = load_workload(args.workload).timing_only([c for c in args.cases.split(",") if c])
    candidates = candidates_of(workload, steps)
    recorded = ", ".join(f"{k} {v}" for k, v in Counter(s.recorded for s in steps).most_common())
    print(f"{len(steps)} attempts of {workload.name} (recorded: {recorded}); {args.compile_load} compiles going meanwhile")
    from warpsmith.agent.worker.process import GpuUnavailable
    passes = []
    for r in range(args.rounds):
        for backend in ("local", "ray") if r % 2 == 0 else ("ray", "local"):
            try:
                passes.append(run_pass(backend, workload, candidates, steps, args.ray_gpus, args.compile_load))
            except (GpuUnavailable, ImportError) as e:  # no GPU here; Ray not installed
                print(f"backend_replay: {backend}: {e}", file=sys.stderr)
                return 3
            print(f"{backend}: {passes[-1].per_attempt_ms:.1f} ms per attempt ({passes[-1].compiles} compiles "
                  "meanwhile)", flush=True)
    print("\n".join(report(passes, steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
