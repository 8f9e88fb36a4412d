"""`warpsmith check WORKLOAD`: everything that needs no GPU, one line per check; and
`preflight`, the part of it that eval, run, resume and bench run before they ask
for the GPU or create a session folder.

Checks, in order: the spec (names, files, sizes, scalars, tolerances: the parser),
that every case fits in host memory (agent/worker/footprint.py: the arrays, and what
reference.py's reference_memory() says the reference holds besides them,
agent/spec/reference_memory.py), the references of the
correctness cases, and of the performance cases cheap enough on the CPU (every
array together at most 4 M elements and 4 GFLOP, agent/drafting/reference_check.py's
budget; the others are computed by eval and run, under the same time limit), each
in its own process under `--reference-timeout`, and an NVRTC compile of every
`[kernels.*]` with its default knobs for `--arch`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from ..spec.cpu_budget import cheap
from ..spec.inputs import ReferenceFailed
from ..spec.precision_policy import allowed_types
from ..spec.reference_memory import FUNCTION, reference_memory
from ..spec.reference_run import REFERENCE_TIMEOUT_S
from ..spec.references import ensure_reference
from ..spec.workload import load_workload
from ..spec.workload_model import Case, SpecError, Workload
from ..worker.footprint import case_footprint, check_memory, host_available_bytes

if TYPE_CHECKING:
    from .help import Subcommands

DEFAULT_ARCH = "sm_90"
RUN_SEEDS = (1, 2)  # the evaluator's DEFAULT_SEED and FRESH_SEED (agent/evaluate/evaluator.py)


def add_check_command(sub: Subcommands) -> None:
    c = sub.add_parser("check", help="everything that needs no GPU: spec, memory, references, kernel compiles")
    c.add_argument("workload")
    c.add_argument("--arch", default=DEFAULT_ARCH, help=f"compile the workload's kernels for this (default {DEFAULT_ARCH})")
    c.add_argument("--allow-no-reference", action="store_true",
                   help="pass even when no case's reference could be computed on this machine (said so in one line)")
    add_reference_timeout(c)


def add_reference_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference-timeout", type=float, default=REFERENCE_TIMEOUT_S, metavar="S",
                   help=f"seconds reference.py may take per case before it is killed (default {REFERENCE_TIMEOUT_S:g})")


def add_separate_judge(p: argparse.ArgumentParser) -> None:
    p.add_argument("--separate-judge", action="store_true",
                   help="compare outputs in a judge process with a CUDA context of its own (local backend)")


def checked_cases(workload: Workload, everything: bool = False) -> list[Case]:
    """The cases whose references are computed before any GPU work: correctness cases
    and cheap performance cases (every case with everything=True)."""
    return [c for c in workload.cases if everything or not c.timed or cheap(workload, c)]


def preflight(workload: Workload, seeds: Iterable[int] = RUN_SEEDS, timeout_s: float = REFERENCE_TIMEOUT_S) -> None:
    """What eval, run, resume and bench check before the GPU: every case fits in host
    memory, and the references of `checked_cases` are computed (cached) for `seeds`
    within `timeout_s` each, and the GPU side can judge its dtypes. Raises SpecError or
    ReferenceFailed, one line each."""
    workload.check_evaluable()
    estimates, failed = reference_estimates(workload, timeout_s)
    if failed:
        print(f"warpsmith: warning: {failed}", file=sys.stderr)
    check_memory(workload, reference_bytes=estimates)
    for case in checked_cases(workload):
        for seed in seeds:
            ensure_reference(workload, case, seed, timeout_s)


def reference_estimates(workload: Workload, timeout_s: float) -> tuple[dict[str, int], Optional[str]]:
    """Each case's reference intermediates by reference.py's reference_memory() ({} where it
    has none), and the one line saying why there is no estimate (None when there is)."""
    try:
        return reference_memory(workload, workload.cases, timeout_s), None
    except ReferenceFailed as e:
        return {}, f"{e}; the host memory estimate counts the arrays only"


def cmd_check(args: argparse.Namespace) -> int:
    say: Callable[[str, str, str], None] = lambda verdict, what, text: print(f"{verdict:<5} {what:<10} {text}")
    try:
        w = load_workload(args.workload)
    except SpecError as e:
        say("FAIL", "spec", str(e))
        return 2
    say("ok", "spec", f"{w.name}: {len(w.params)} params, {len(w.cases)} cases, {len(w.kernels)} kernels")
    for kernel in dict.fromkeys(k for k, _, _ in w.not_applicable):
        cases = [(c, why) for k, c, why in w.not_applicable if k == kernel]
        more = f" (also {', '.join(repr(c) for c, _ in cases[1:])})" if len(cases) > 1 else ""
        say("n/a", "kernel", f"{kernel} cannot serve case '{cases[0][0]}': {cases[0][1]}{more}; "
            "other kernels serve it")
    ok = True
    checked = checked_cases(w)
    estimates, failed = reference_estimates(w, args.reference_timeout)
    if failed:
        say("warn", "memory", failed)

    def need(case: Case) -> int:
        return case_footprint(w, case, "host") + estimates.get(case.name, 0)
    try:  # the references run here must fit here; the others are eval's and run's, on their machine
        check_memory(w, only=checked, reference_bytes=estimates)
        biggest = max(checked or w.cases, key=need)
        available = host_available_bytes()
        say("ok", "memory", f"largest case checked here, '{biggest.name}', needs {need(biggest) / 2**30:.2f} GiB "
            "on the host" + (f" (of {available / 2**30:.1f} GiB available)" if available else "")
            + (f", with what its reference.py's {FUNCTION}() adds" if estimates else ""))
        fits = True
    except SpecError as e:
        say("FAIL", "memory", str(e))
        ok = fits = False
    for case in (c for c in w.cases if c not in checked):
        try:
            check_memory(w, only=[case], reference_bytes=estimates)
        except SpecError as e:
            say("warn", "memory", f"{e.problem}: not computed here; eval and run need a host with that much")
    computed = 0
    for i, case in enumerate(w.cases):
        if not ok and fits:  # a reference failed: the next cases would cost a timeout each to say the same
            say("skip", "reference", f"{len(w.cases) - i} more case(s), not tried after the first failure")
            break
        if not fits or case not in checked:
            why = "does not fit" if not fits else "performance case above the CPU budget: eval and run compute it"
            say("skip", "reference", f"case '{case.name}': {why}")
            continue
        t0 = time.monotonic()
        try:
            ensure_reference(w, case, RUN_SEEDS[0], args.reference_timeout)
            say("ok", "reference", f"case '{case.name}' ({time.monotonic() - t0:.1f} s)")
            computed += 1
        except ReferenceFailed as e:
            say("FAIL", "reference", str(e))
            ok = False
    if fits and ok and not computed:  # nothing was checked: a pass would say nothing about reference.py
        if args.allow_no_reference:
            say("skip", "reference", "no case's reference was computed here (--allow-no-reference): eval and run "
                "compute them on the GPU machine")
        else:
            say("FAIL", "reference", "no case's reference was computed here, so reference.py is unchecked: add a "
                "correctness case small enough for the CPU, or pass --allow-no-reference")
            ok = False
    ok &= _compile_kernels(w, args.arch, say)
    return 0 if ok else 2


def _compile_kernels(w: Workload, arch: str, say: Callable[[str, str, str], None]) -> bool:
    from ..evaluate.compile_audit import compile_candidate
    from ..spec.candidate import Candidate
    ok = True
    if not w.kernels:
        say("skip", "compile", "no kernels: the workload starts from scratch (the llm proposer writes the first)")
    for name, spec in w.kernels.items():
        # As a candidate is compiled: the policy, NVRTC and the audits (state kept between
        # launches, 16-bit accumulation where the workload's policy forbids it)
        candidate = dataclasses.replace(Candidate.from_spec(spec), name=spec.path.stem)  # NVRTC's log names the file
        r = compile_candidate(candidate, arch, w.tolerance.allow_fast_math, wide_accumulation=w.wide_accumulation,
                              narrow_allowed=allowed_types(w))
        if r.ok:
            say("ok", "compile", f"kernel {name} -> {r.arch}: {r.resources.text()} ({r.compile_ms:.0f} ms)")
        else:
            lines = r.log.splitlines()
            first = next((line for line in lines if "error" in line), lines[0] if lines else r.error)
            say("FAIL", "compile", f"kernel {name} ({spec.path.name}): {r.error}: {first.strip()}")
            ok = False
    return ok
