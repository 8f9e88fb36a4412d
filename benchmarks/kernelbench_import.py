"""Every level-1 and level-2 KernelBench problem through `warpsmith import` and
`warpsmith check`, each in its own process with a time limit, and one table: imported
or refused (with the one line that says why), check's exit code, and how many
references check computed on the CPU. Needs PyTorch (the CPU build is enough).

    python3 benchmarks/kernelbench_import.py KERNELBENCH_CHECKOUT [--levels 1 2] [--timeout 120] [--jobs 2]
                                             [--import-only] [--keep DIR]

KERNELBENCH_CHECKOUT holds KernelBench/level1/*.py (a clone of the KernelBench repository).
The workloads are written to a temporary folder, removed at the end (--keep DIR keeps them).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    problem: str
    imported: bool
    why: str  # the refusal's line, or the import's "not kept" notes
    check_rc: int | None  # None: not run (refused), or timed out
    references: int  # "ok    reference" lines
    seconds: float


def _warpsmith(args: list[str], timeout: float) -> tuple[int | None, str]:
    try:
        done = subprocess.run([sys.executable, "-m", "warpsmith.tui.cli", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:g} s"
    return done.returncode, done.stdout + done.stderr


def one(problem: Path, out: Path, timeout: float, check: bool = True) -> Row:
    t0 = time.monotonic()
    target = out / f"{problem.parent.name}_{problem.stem}"
    rc, text = _warpsmith(["import", str(problem), str(target), "--name", "kb"], timeout)
    if rc != 0:
        line = next((l for l in text.splitlines() if l.strip()), "")
        return Row(problem.stem, False, line.replace("warpsmith: error: ", ""), None, 0, time.monotonic() - t0)
    notes = "; ".join(l.split("not kept: ", 1)[1] for l in text.splitlines() if "not kept: " in l)
    if not check:
        return Row(problem.stem, True, notes, None, 0, time.monotonic() - t0)
    rc, text = _warpsmith(["check", str(target), "--reference-timeout", str(timeout / 2)], timeout)
    computed = sum(1 for l in text.splitlines() if l.startswith("ok    reference"))
    if rc != 0:
        notes = "; ".join(filter(None, [notes, *(l for l in text.splitlines() if l.startswith("FAIL"))]))
    return Row(problem.stem, True, notes, rc, computed, time.monotonic() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds for each import and each check")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--import-only", action="store_true", help="no check: the import's figures alone")
    ap.add_argument("--keep", type=Path, help="write the workloads here and keep them")
    args = ap.parse_args()
    problems = [p for level in args.levels
                for p in sorted((args.checkout / "KernelBench" / f"level{level}").glob("*.py"),
                                key=lambda p: int(p.name.split("_")[0]) if p.name[0].isdigit() else 0)]
    if not problems:
        print(f"no KernelBench/level*/ problems under {args.checkout}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            rows = []
            for row in pool.map(lambda p: one(p, out, args.timeout, not args.import_only), problems):
                rows.append(row)
                state = "imported" if row.imported else "refused"
                check = "-" if row.check_rc is None else str(row.check_rc)
                print(f"{row.problem[:44]:<44} {state:<8} check {check:<2} refs {row.references} "
                      f"{row.seconds:5.1f} s  {row.why[:160]}", flush=True)
    imported = [r for r in rows if r.imported]
    print(f"\n{len(rows)} problems: {len(imported)} imported, {len(rows) - len(imported)} refused; "
          f"check exit 0: {sum(r.check_rc == 0 for r in imported)}; a reference computed: "
          f"{sum(r.references > 0 for r in imported)}; with notes (not kept): {sum(bool(r.why) for r in imported)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
