"""The best kernel as files a user keeps: kernel.cu, launch.json, report.md and, from
`warpsmith export`, kernel.py (a module with launch(...) for CuPy and torch: launch_module.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

from ..evaluate.dispatch import Dispatch
from ..evaluate.records import Best
from ..evaluate.session_result import SessionResult
from ..runtime.compile_policy import check_options, define_options
from ..runtime.device_facts import DeviceFacts
from ..spec.launch import LaunchJob
from ..spec.visible_text import visible
from ..spec.workload_model import ScalarParam, Workload, array_layouts
from .dispatch_module import DISPATCH_FILE, dispatch_module, variant_file
from .launch_module import MODULE_FILE, launch_module


def launch_json(workload: Workload, best: Best) -> dict[str, Any]:
    """Raises ValueError if the options are not ones the compiler would accept (a
    tampered session): kernel.py passes them to NVRTC on the user's machine."""
    cand = best.spec.to_candidate()
    refusal = check_options(list(best.spec.options) + define_options(best.spec.defines),
                            workload.tolerance.allow_fast_math)
    if refusal:
        raise ValueError(f"the best kernel cannot be exported: {refusal}")
    per_case: dict[str, dict[str, Any]] = {}
    for case in workload.cases:
        if cand.program is not None:  # every step resolved, and the workspace sizes
            scalars = {p.name: p.arg(case) for p in workload.params if isinstance(p, ScalarParam)}
            job = cand.program.resolve(cand.launch_env(case), scalars, array_layouts(workload, case))
            per_case[case.name] = {"sizes": case.sizes, "workspace": {w.name: w.count for w in job.workspace},
                                   "steps": [{"entry": s.entry, "grid": list(s.launch.grid), "block": list(s.launch.block),
                                              "shared": s.launch.shared} if isinstance(s, LaunchJob)
                                             else {"memset": s.target} for s in job.steps]}
            continue
        launch = cand.rule_for(case).resolve(cand.launch_env(case))
        per_case[case.name] = {"sizes": case.sizes, "grid": list(launch.grid), "block": list(launch.block),
                               "shared": launch.shared}
    return {"workload": workload.name, "entry": best.spec.entry, "options": best.spec.options,
            "defines": best.spec.defines, "grid": best.spec.grid, "block": best.spec.block,
            "shared": best.spec.shared, "signature": workload.signature(), "score_ms": best.score_ms,
            **({"program": best.spec.program} if best.spec.program else {}), "cases": per_case}


def report_md(workload: Workload, best: Best, start: Optional[Best], baseline: dict[str, float],
              baseline_score: Optional[float], facts: DeviceFacts, ended: str = "") -> str:
    starts = {c.case: c.median_ms for c in start.cases} if start else {}
    lines = [f"# {workload.name}: best single variant `{best.spec.name}`", "",
             f"GPU: {facts.name or '?'} ({facts.arch or '?'}), cold L2, median of up to 100 launches.", "",
             "| case | starting kernel ms | best ms | baseline ms | speed-up vs start | speed-up vs baseline |",
             "|---|---|---|---|---|---|"]
    fmt: Callable[[Optional[float]], str] = lambda v: f"{v:.4f}" if v else "-"
    ratio: Callable[[Optional[float], Optional[float]], str] = lambda a, b: f"{a / b:.2f}x" if a and b else "-"
    for c in best.cases:
        if c.role != "performance":
            continue
        s, b = starts.get(c.case), baseline.get(c.case)
        lines.append(f"| {c.case} | {fmt(s)} | {fmt(c.median_ms)} | {fmt(b)} | {ratio(s, c.median_ms)} | {ratio(b, c.median_ms)} |")
    lines += ["", f"Score (geometric mean): start {fmt(start.score_ms if start else None)} ms, best {best.score_ms:.4f} ms, "
              f"baseline {fmt(baseline_score)} ms.", "", f"Found at iteration {best.iteration}. Rationale: {_one_line(best.spec.rationale)}", ""]
    if ended:
        lines += [f"Session: {ended}.", ""]
    return "\n".join(lines)


def _one_line(text: str) -> str:
    """Model-written text on one line of the report, which the app renders as Markdown: no
    line of its own becomes a heading, a table or a block, and no control character stays."""
    return " ".join(visible(text).split()) or "-"


def write_best(directory: Path, workload: Workload, best: Best, start: Optional[Best], baseline: dict[str, float],
               baseline_score: Optional[float], facts: DeviceFacts, module: bool = False, ended: str = "",
               dispatch: Optional[Dispatch] = None, result: Optional[SessionResult] = None) -> dict[str, str]:
    """`ended`: how the session stopped (which limit) and what it spent, for the report.
    `module`: also kernel.py, the kernel with its launch rule (or its program's steps) as a
    module of its own.
    `dispatch`: the session's variant per shape, as dispatch.json and a report section; with
    `module` and a dispatch that pays, kernel.py chooses among variant_N.py by the sizes.
    `result`: what the user gets (agent/evaluate/session_result.py), first in the report."""
    report = report_md(workload, best, start, baseline, baseline_score, facts, ended)
    if result is not None:
        report = "\n".join([f"# {workload.name}: {result.headline()}", "",
                             f"GPU: {facts.name or '?'} ({facts.arch or '?'}), cold L2, median of up to 100 launches; "
                             "the library is the fastest of every one timed on that case.", "",
                             *result.table(), "", report.replace("# ", "## ", 1)])
    files = {"kernel.cu": best.spec.source,
             "launch.json": json.dumps(launch_json(workload, best), indent=2),
             "report.md": report}
    if dispatch is not None:
        files["dispatch.json"] = dispatch.model_dump_json(indent=2)
        files["report.md"] += "\n".join(["## Variant per shape (dispatch.json)", "", *dispatch.lines(), ""])
    if module and dispatch is not None and dispatch.pays:
        files[DISPATCH_FILE] = dispatch_module(workload.name, dispatch)
        for i, v in enumerate(dispatch.variants):
            times = [e.median_ms for e in dispatch.entries if e.variant == i]
            files[variant_file(i)] = launch_module(workload, Best(spec=v, score_ms=min(times, default=best.score_ms),
                                                                  cases=[], iteration=best.iteration))
    elif module:
        files[MODULE_FILE] = launch_module(workload, best)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return files
