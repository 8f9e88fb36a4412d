"""The best kernel as files a user keeps: kernel.cu, launch.json, report.md and a
loader snippet (written by `warpsmith export`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from ..evaluate.records import Best
from ..runtime.compile_policy import check_options, define_options
from ..runtime.device_facts import DeviceFacts
from ..spec.workload import Workload


def launch_json(workload: Workload, best: Best) -> dict:
    """Raises ValueError if the options are not ones the compiler would accept (a
    tampered session): the loader passes them to NVRTC on the user's machine."""
    cand = best.spec.to_candidate()
    refusal = check_options(list(best.spec.options) + define_options(best.spec.defines),
                            workload.tolerance.allow_fast_math)
    if refusal:
        raise ValueError(f"the best kernel cannot be exported: {refusal}")
    per_case = {}
    for case in workload.cases:
        launch = cand.rule_for(case).resolve(cand.launch_env(case))
        per_case[case.name] = {"sizes": case.sizes, "grid": list(launch.grid), "block": list(launch.block),
                               "shared": launch.shared}
    return {"workload": workload.name, "entry": best.spec.entry, "options": best.spec.options,
            "defines": best.spec.defines, "grid": best.spec.grid, "block": best.spec.block,
            "shared": best.spec.shared, "signature": workload.signature(), "score_ms": best.score_ms,
            "cases": per_case}


def report_md(workload: Workload, best: Best, start: Optional[Best], baseline: dict[str, float],
              baseline_score: Optional[float], facts: DeviceFacts, ended: str = "") -> str:
    starts = {c.case: c.median_ms for c in start.cases} if start else {}
    lines = [f"# {workload.name}: best kernel `{best.spec.name}`", "",
             f"GPU: {facts.name or '?'} ({facts.arch or '?'}), cold L2, median of up to 100 launches.", "",
             "| case | starting kernel ms | best ms | baseline ms | speed-up vs start | speed-up vs baseline |",
             "|---|---|---|---|---|---|"]
    fmt = lambda v: f"{v:.4f}" if v else "-"
    ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"
    for c in best.cases:
        if c.role != "performance":
            continue
        s, b = starts.get(c.case), baseline.get(c.case)
        lines.append(f"| {c.case} | {fmt(s)} | {fmt(c.median_ms)} | {fmt(b)} | {ratio(s, c.median_ms)} | {ratio(b, c.median_ms)} |")
    lines += ["", f"Score (geometric mean): start {fmt(start.score_ms if start else None)} ms, best {best.score_ms:.4f} ms, "
              f"baseline {fmt(baseline_score)} ms.", "", f"Found at iteration {best.iteration}. Rationale: {best.spec.rationale or '-'}", ""]
    if ended:
        lines += [f"Session: {ended}.", ""]
    return "\n".join(lines)


LOADER = '''"""Load and launch the kernel warpsmith found, with CuPy (any loader of CUDA C++ works)."""
import json
from pathlib import Path

import cupy

here = Path(__file__).parent
launch = json.loads((here / "launch.json").read_text())
options = tuple(launch["options"]) + tuple(f"-D{{k}}={{v}}" for k, v in launch["defines"].items())
module = cupy.RawModule(code=(here / "kernel.cu").read_text(), options=options)
kernel = module.get_function(launch["entry"])
# Per-case grid/block/shared are in launch["cases"]; the rule is launch["grid"], launch["block"].
# Signature: {signature}
'''


def write_best(directory: Path, workload: Workload, best: Best, start: Optional[Best], baseline: dict[str, float],
               baseline_score: Optional[float], facts: DeviceFacts, loader: bool = False, ended: str = "") -> dict[str, str]:
    """`ended`: how the session stopped (which limit) and what it spent, for the report."""
    files = {"kernel.cu": best.spec.source,
             "launch.json": json.dumps(launch_json(workload, best), indent=2),
             "report.md": report_md(workload, best, start, baseline, baseline_score, facts, ended)}
    if loader:
        files["load_kernel.py"] = LOADER.format(signature=workload.signature())
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return files
