"""`warpsmith bench`: for each workload, the starting kernel, the tuner's best and
the session's dispatch when it paid (a variant per shape), every baseline (cuBLAS,
PyTorch eager, torch.compile where installed), measured
by one evaluator (one worker, one timing loop, the same flush and events), in
one table: per performance case the median, the rate (TFLOP/s for compute-bound
cases, GB/s for memory-bound ones), the % of the speed-of-light floor and the
speed-up against each baseline. After the tables, every workload against the fastest
library of each case and the suite's geomean (render_suite).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..evaluate.backend import EvaluationBackend
from ..evaluate.dispatch import Dispatch
from ..evaluate.records import CandidateSpec
from ..evaluate.results import EvaluationResult, Status
from ..evaluate.stats import geomean
from ..spec.speed_of_light import Ceilings, case_floor
from ..spec.workload import load_workload
from ..spec.workload_model import SpecError, Workload
from .errors import CliError


@dataclass
class Entry:
    """One implementation on one workload."""

    name: str
    role: str  # start | best | dispatch | baseline
    status: str
    medians: dict[str, float] = field(default_factory=dict)  # performance case -> ms
    score_ms: Optional[float] = None
    detail: str = ""


@dataclass
class WorkloadBench:
    workload: str
    gpu: str
    session: str
    tune_iterations: int
    tune_wall_s: float
    ceilings: str
    tuned_for: str = "all cases"  # the performance cases the tuner scored (bench --cases)
    entries: list[Entry] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # per case x implementation, for --json
    focused: dict[str, int] = field(default_factory=dict)  # performance case -> the tuner's attempts searched for it
    unfocused: int = 0  # attempts scored on the geomean of every case

    def baselines(self) -> list[Entry]:
        return [e for e in self.entries if e.role == "baseline" and e.score_ms]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "WorkloadBench":
        """Back from `bench --json`'s objects (benchmarks/suite_table.py joins several runs)."""
        return cls(**{**d, "entries": [Entry(**e) for e in d.get("entries", [])]})


def _entry(name: str, role: str, result: Optional[EvaluationResult]) -> Entry:
    if result is None:
        return Entry(name, role, "unavailable")
    medians = {c.case: c.timing.median_ms for c in result.cases if c.timing}
    return Entry(name, role, result.status, medians, result.score_ms, result.detail.splitlines()[0] if result.detail else "")


def measure(workload: Workload, ev: EvaluationBackend, best_spec: Optional[CandidateSpec], session_id: str = "-", iterations: int = 0,
            wall_s: float = 0.0, skip: tuple[str, ...] = (), tuned_for: tuple[str, ...] = (),
            dispatch: Optional[Dispatch] = None) -> WorkloadBench:
    """Start, best, the session's dispatch (when it paid) and baselines on one
    evaluator, so they are timed alike."""
    from ..spec.candidate import Candidate
    bench = WorkloadBench(workload.name, ev.facts.name or "?", session_id, iterations, wall_s,
                          ev.ceilings.source if ev.ceilings else "none", ", ".join(tuned_for) or "all cases")
    assert workload.start_kernel is not None  # bench refuses a workload without one (needs_start_kernel)
    start = Candidate.from_spec(workload.start_kernel)
    bench.entries.append(_entry(f"start: {start.name}", "start", ev.evaluate(start)))
    if best_spec is not None:
        bench.entries.append(_entry(f"best: {best_spec.name}", "best", ev.evaluate(best_spec.to_candidate())))
    if dispatch is not None and dispatch.pays:
        bench.entries.append(_dispatch_entry(ev, dispatch))
    for kind in [k for k in ev.baseline_kinds() if k not in skip]:
        bench.entries.append(_entry(kind, "baseline", ev.baseline(kind=kind)))
    bench.rows = _rows(workload, bench, ev.ceilings)
    return bench


def _dispatch_entry(ev: EvaluationBackend, dispatch: Dispatch) -> Entry:
    """The dispatch timed here like every other row: each variant evaluated once (every
    case validated), each case's median taken from the variant the dispatch gives it.
    One failing variant fails the row."""
    used = sorted({e.variant for e in dispatch.entries})
    name = f"dispatch: {len(used)} variants ({', '.join(dispatch.variants[i].name for i in used)})"
    results = {i: ev.evaluate(dispatch.variants[i].to_candidate()) for i in used}
    bad = next((r for r in results.values() if not r.ok), None)
    if bad is not None:
        return _entry(name, "dispatch", bad)
    medians = {}
    for e in dispatch.entries:
        timing = next((c.timing for c in results[e.variant].cases if c.case == e.case and c.timing), None)
        if timing is not None:
            medians[e.case] = timing.median_ms
    score = geomean(list(medians.values())) if medians else None
    return Entry(name, "dispatch", Status.OK, medians, score)


def _rows(workload: Workload, bench: WorkloadBench, ceilings: Optional[Ceilings]) -> list[dict[str, Any]]:
    rows = []
    for case in [c for c in workload.cases if c.timed]:
        for e in bench.entries:
            ms = e.medians.get(case.name)
            row = {"case": case.name, "implementation": e.name, "role": e.role, "status": e.status, "median_ms": ms}
            if ms:
                floor = case_floor(workload, case, ceilings, ms) if ceilings else None
                if floor is not None:
                    row["bound"], row["pct_of_floor"], row["suspect"] = floor.bound, floor.pct_of_floor, floor.suspect
                if workload.flops is not None:
                    row["tflops"] = workload.flops.evaluate(case.sizes) / (ms * 1e-3) / 1e12
                if workload.bytes is not None:
                    row["gbs"] = workload.bytes.evaluate(case.sizes) / (ms * 1e-3) / 1e9
                for b in bench.baselines():
                    if b.medians.get(case.name):
                        row[f"vs {b.name}"] = b.medians[case.name] / ms
            rows.append(row)
    return rows


def render(bench: WorkloadBench) -> str:
    bases = [b.name for b in bench.baselines()]
    head = ["case", "implementation", "median ms", "rate", "% floor"] + [f"vs {b}" for b in bases]
    lines = [f"## {bench.workload} on {bench.gpu}: tuner {bench.tune_iterations} iterations in {bench.tune_wall_s:.0f} s "
             f"(session {bench.session}, scored on {bench.tuned_for}); floor from {bench.ceilings}",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in bench.rows:
        ms = r.get("median_ms")
        if ms is None:
            cells = [r["case"], r["implementation"], r["status"], "-", "-"] + ["-"] * len(bases)
        else:
            rate = (f"{r['tflops']:.2f} TFLOP/s" if r.get("bound") == "compute" and "tflops" in r
                    else f"{r['gbs']:.0f} GB/s" if "gbs" in r else "-")
            pct = f"{r['pct_of_floor']:.0%}" + (" SUSPECT" if r.get("suspect") else "") if "pct_of_floor" in r else "-"
            cells = [r["case"], r["implementation"], f"{ms:.4f}", rate, pct] + \
                    [f"{r[f'vs {b}']:.2f}x" if f"vs {b}" in r else "-" for b in bases]
        lines.append("| " + " | ".join(cells) + " |")
    scores = ", ".join(f"{e.name} {e.score_ms:.4f}" for e in bench.entries if e.score_ms)
    lines.append(f"score (geomean ms): {scores}")
    lines += per_case_lines(bench)
    failed = [f"{e.name}: {e.status} {e.detail}" for e in bench.entries if e.status not in (Status.OK, "unavailable")]
    lines += [f"not ok: {f}" for f in failed]
    return "\n".join(lines)


def per_case_lines(bench: WorkloadBench) -> list[str]:
    """Per performance case: the attempts the search spent on it, how close ours is to the
    floor and how it stands against the fastest library there."""
    comparison = against_libraries(bench)
    if comparison is None:
        return []
    floors = {r["case"]: r.get("pct_of_floor") for r in bench.rows
              if r["role"] == comparison.ours and r.get("median_ms")}
    out = ["", f"per case ({comparison.ours}; {bench.unfocused} attempts scored on every case):",
           "| case | attempts for it | % floor | vs the fastest library |", "|---|---|---|---|"]
    for case, (ratio, lib) in comparison.per_case.items():
        pct = floors.get(case)
        out.append(f"| {case} | {bench.focused.get(case, 0)} | {f'{pct:.0%}' if pct else '-'} | {ratio:.3f}x ({lib}) |")
    return out


@dataclass
class LibraryComparison:
    """One workload's result against the fastest library of each performance case: ours is the dispatch row where the session's dispatch paid, else the
    best, else the starting kernel (a bench with --budget 0)."""

    workload: str
    ours: str
    per_case: dict[str, tuple[float, str]]  # case -> (library ms / our ms, the library)

    @property
    def ratio(self) -> float:
        return geomean([r for r, _ in self.per_case.values()])


def against_libraries(bench: WorkloadBench) -> Optional[LibraryComparison]:
    """None where the workload has no baseline timed on a case ours ran."""
    ours = next((e for role in ("dispatch", "best", "start") for e in bench.entries
                 if e.role == role and e.status == Status.OK and e.medians), None)
    if ours is None:
        return None
    per_case = {}
    for case, ms in ours.medians.items():
        times = [(b.medians[case], b.name) for b in bench.baselines() if b.medians.get(case)]
        if times and ms > 0:
            fastest_ms, name = min(times)
            per_case[case] = (fastest_ms / ms, name)
    return LibraryComparison(bench.workload, ours.role, per_case) if per_case else None


def render_suite(results: list[WorkloadBench]) -> str:
    """Every workload against the fastest library of each case, and the suite's geomean
    over workloads; '' when no workload has a baseline."""
    rows = [c for c in (against_libraries(b) for b in results) if c is not None]
    if not rows:
        return ""
    lines = ["## Against the fastest library of each case",
             "| workload | ours | per case (ours vs the fastest library there) | geomean |", "|---|---|---|---|"]
    for c in rows:
        cases = ", ".join(f"{case} {r:.3f}x ({lib})" for case, (r, lib) in c.per_case.items())
        lines.append(f"| {c.workload} | {c.ours} | {cases} | {c.ratio:.3f}x |")
    suite = geomean([c.ratio for c in rows])
    lines.append(f"suite geomean over {len(rows)} workload{'s' if len(rows) != 1 else ''}: {suite:.3f}x")
    return "\n".join(lines)


def cmd_bench(args: argparse.Namespace) -> int:
    from ..worker.process import GpuUnavailable
    try:
        return _bench(args)
    except GpuUnavailable as e:
        raise CliError(f"no usable GPU: {e}. `warpsmith doctor` says what is missing.", 3)


def _evaluable_or_noted(w: Workload) -> bool:
    try:
        w.check_evaluable()
        return True
    except SpecError as e:
        print(f"warpsmith: note: {w.name} left out: {e.problem}", file=sys.stderr)
        return False


def with_shapes(workloads: list[Workload], path: Path, named: bool) -> list[Workload]:
    """The workloads a shapes file has shapes for, each with those as its performance cases
    (agent/spec/shapes.py). Named on the command line, every one needs shapes in the file."""
    from ..spec.shapes import load_shapes
    shapes = load_shapes(path)
    unknown = [name for name in shapes if name not in {w.name for w in workloads}]
    if unknown and not named:  # a file may hold shapes for more workloads than those named
        raise CliError(f"{path}: [[{unknown[0]}]] names no workload benched here (those are: "
                       f"{', '.join(w.name for w in workloads)})")
    missing = [w.name for w in workloads if w.name not in shapes]
    if named and missing:
        raise CliError(f"{path}: no [[{missing[0]}]] shapes for workload {missing[0]}")
    return [load_workload(w.directory, shapes[w.name]) for w in workloads if w.name in shapes]


def _bench(args: argparse.Namespace) -> int:
    from ..evaluate.evaluator import Evaluator
    from ..loop.session import stored_session
    from ..worker.footprint import check_memory
    from .options import bench_options
    from .sessions import drive_session, start_session
    paths = args.workloads or sorted(p.parent for p in Path("examples").glob("*/workload.toml"))
    workloads = [load_workload(Path(p)) for p in paths]  # every spec checked before any GPU work
    if args.shapes is not None:
        workloads = with_shapes(workloads, args.shapes, named=bool(args.workloads))
    if not args.workloads:  # every example: those the GPU side cannot judge yet are left out, said once each
        workloads = [w for w in workloads if _evaluable_or_noted(w)]
    from ..drafting.drafting import refuse_drafted
    refusals = [r for r in map(refuse_drafted, workloads) if r]
    refusals += [r for w in workloads if (r := w.needs_start_kernel("bench"))]
    try:  # --cases names performance cases of every workload benched
        for w in workloads:
            w.timing_only(args.cases)
    except ValueError as e:
        refusals.append(str(e))
    if refusals:
        raise CliError(str(refusals[0]))
    from ..tracking.options import check_readable
    from .check import preflight
    options = bench_options(args)
    check_readable(options.tracking)
    for w in workloads:  # memory and references of every workload, before any GPU work or session
        preflight(w, timeout_s=args.reference_timeout)
    if args.cases and args.budget <= 0:
        print("warpsmith: warning: --cases only steers the tuner, and --budget 0 runs none; every case is timed",
              file=sys.stderr)
    results, noted = [], False
    from ..worker.torch_baseline import note_torch_missing

    def note_once() -> None:  # once the GPU is known to be there: not a second line beside "no usable GPU"
        nonlocal noted
        if not noted:
            note_torch_missing(workloads)
            noted = True
    # With --json stdout carries only the JSON: progress and reports go to stderr.
    out = sys.stderr if args.json else sys.stdout
    for w in workloads:
        best_spec, session_id, iterations, wall, dispatch, history = None, "-", 0, 0.0, None, []
        if options.search.budget > 0:
            t0 = time.monotonic()
            session = start_session(options, w, out)
            note_once()
            session_id = session.info.id
            code = drive_session(session, options, out=out)
            wall = time.monotonic() - t0
            if code != 0:  # failed (no GPU, ...) or stopped (Ctrl-C, SIGTERM): said so already
                return code
            state = stored_session(options.tracking.store, session_id)[1]
            best = state.get("best")
            best_spec = best.spec if best else None
            dispatch = state.get("dispatch")
            iterations = state.get("iteration", 0)
            history = state.get("history", [])
        with Evaluator(w, options.evaluation) as ev:
            check_memory(w, gpu_bytes=ev.facts.total_memory or None, host=False)
            note_once()
            bench = measure(w, ev, best_spec, session_id, iterations, wall, tuple(args.skip_baseline),
                            tuple(args.cases) if args.budget > 0 else (), dispatch)
            bench.focused = dict(Counter(a.focus for a in history if a.focus))
            bench.unfocused = sum(a.focus is None for a in history)
            results.append(bench)
    if args.json:
        print(json.dumps([asdict(r) for r in results], default=str))
    else:
        suite = render_suite(results)
        print("\n\n".join([render(r) for r in results] + ([suite] if suite else [])))
    return 0
