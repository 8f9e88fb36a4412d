"""`warpsmith diff SESSION A [B]`: the unified diff of two attempts' kernels (B
defaults to the best) with both attempts' per-case results, from the session's
checkpoint and its attempts/ folder (so it works with tracking off)."""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import Optional

from ..evaluate.records import Attempt
from ..spec.visible_text import visible
from .errors import CliError


def attempt_table(a: Attempt) -> list[str]:
    head = f"#{a.iteration} {a.name} [{a.proposer}]: {a.status}" + (f", score {a.score_ms:.4f} ms" if a.score_ms else "")
    rows = [f"  {c.case:<28} {c.status:<14} " + (f"{c.median_ms:.4f} ms" if c.median_ms else "-")
            + (f"  {c.pct_of_floor:.0%} of floor" if c.pct_of_floor else "") for c in a.cases]
    return [head, *rows]


def render_diff(folder: Path, a: Attempt, b: Attempt) -> str:
    def source(x: Attempt) -> list[str]:
        """What was compiled and how it runs: a program's steps, the knob overrides (passed
        as -D) as #defines, then the file."""
        path = folder / f"{x.iteration:03d}" / "kernel.cu"
        knobs = [f"#define {k} {v}  // -D{k}={v}\n" for k, v in sorted(x.defines.items())]
        return _program_lines(folder / f"{x.iteration:03d}" / "candidate.json") + knobs + \
            (path.read_text().splitlines(True) if path.is_file() else ["// (kernel not archived)\n"])
    diff = "".join(difflib.unified_diff(source(a), source(b), f"attempt-{a.iteration:03d}/kernel.cu",
                                        f"attempt-{b.iteration:03d}/kernel.cu"))
    return "\n".join([*attempt_table(a), *attempt_table(b), "", diff or "(the same source and knobs)"])


def _program_lines(candidate_json: Path) -> list[str]:
    """// lines describing the attempt's program, if it was one (nothing for a single launch)."""
    from ..evaluate.records import CandidateSpec
    if not candidate_json.is_file():
        return []
    try:
        program = CandidateSpec.model_validate_json(candidate_json.read_text()).to_candidate().program
    except ValueError:  # an archived record this version cannot read: the source diff still stands
        return []
    return [f"// {line}\n" for line in program.describe()] if program else []


def cmd_diff(args: argparse.Namespace) -> int:
    from ..loop.session import session_dir, stored_session
    try:
        info, state = stored_session(args.store, args.session)
    except FileNotFoundError as e:
        raise CliError(str(e))
    history = {a.iteration: a for a in state.get("history", [])}
    best = state.get("best")
    b_it: Optional[int] = args.b if args.b is not None else (best.iteration if best else None)
    if args.parent:  # the child against the attempt it came from: parent first, as a diff reads
        child = history.get(args.a)
        if child is None or not child.parent:
            raise CliError(f"attempt {args.a} of {info.id} has no parent attempt recorded "
                           "(the first of its kernel, a restart, or a session from before parents were kept)")
        args.a, b_it = child.parent, args.a
    missing = [x for x in (args.a, b_it) if x not in history]
    if missing:
        what = "the best is the starting kernel" if b_it == 0 else f"attempts are 1..{max(history, default=0)}"
        raise CliError(f"no attempt {missing[0]} in {info.id} ({what})")
    assert b_it is not None  # an attempt's iteration: not missing
    print(visible(render_diff(session_dir(args.store, info.id) / "attempts", history[args.a], history[b_it])))
    return 0
