"""Every expression of a parsed workload evaluated on every case, so that a broken spec
fails at load time with one line naming the key and the case; and which shipped kernel
cannot serve which case (its launch or workspace out of range there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .expr import Expr, ExprError
from .launch import MemsetStep
from .param_tables import range_problem
from .workload_model import (
    SQUARE_STRUCTURES,
    ArrayParam,
    Case,
    KernelSpec,
    ScalarParam,
    SpecError,
    Workload,
    program_problem,
    scalar_problem,
)

MAX_ARRAY_BYTES = 1 << 48  # 256 TiB: no product of dimensions near int64 can get through


def check_against_cases(w: Workload, path: Path) -> tuple[tuple[str, str, str], ...]:
    """Evaluate every expression for every case so errors surface now. Returns the
    (kernel, case, why) pairs where a kernel cannot serve a case; a case that no kernel
    serves is an error."""
    arrays = {p.name: p.role for p in w.params if isinstance(p, ArrayParam)}
    scalars = {p.name for p in w.params if isinstance(p, ScalarParam)}
    sizes = {n for c in w.cases for n in c.sizes}
    for kname, k in w.kernels.items():
        malformed = k.program.problems(arrays, scalars) if k.program else None
        if malformed:
            raise SpecError(path, f"kernels.{kname}", malformed)
        unknown = sorted(_rule_names(k) - sizes - set(k.knobs()) - set(k.defines))
        if unknown:  # wrong on every case, however many other kernels serve them
            raise SpecError(path, f"kernels.{kname}", f"launch for case '{w.cases[0].name}': '{unknown[0]}' is "
                            "neither a size nor one of the kernel's knobs or defines")
    not_applicable = []
    for case in w.cases:
        def check(expr: Expr, key: str, integer: bool = True) -> None:
            try:
                value = expr.evaluate_int(case.sizes) if integer else expr.evaluate(case.sizes)
            except ExprError as e:
                raise SpecError(path, key, f"for case '{case.name}': {e}") from None
            if integer and value < 1 and ".shape[" in key:
                raise SpecError(path, key, f"for case '{case.name}': dimension {value} < 1")
        for j, p in enumerate(w.params):
            if isinstance(p, ArrayParam):
                for d, e in enumerate(p.shape):
                    check(e, f"params[{j}].shape[{d}]")
                shape = w.shape(p, case)
                if p.structure in SQUARE_STRUCTURES and shape[-1] != shape[-2]:
                    raise SpecError(path, f"params[{j}].structure", f"for case '{case.name}': {p.name} is "
                                    f"{' x '.join(map(str, shape))}; {p.structure} needs its last two dimensions equal")
                if p.low.names() or p.high.names():
                    check(p.low, f"params[{j}].range", integer=False)
                    check(p.high, f"params[{j}].range", integer=False)
                    bad_range = range_problem(p.dtype, p.structure, *w.bounds(p, case))
                    if bad_range:
                        raise SpecError(path, f"params[{j}].range", f"for case '{case.name}': {bad_range}")
                nbytes = w.array_bytes(p, case)
                if nbytes > MAX_ARRAY_BYTES:
                    raise SpecError(path, f"params[{j}].shape", f"for case '{case.name}': {p.name} would be "
                                    f"{nbytes} bytes, more than any machine ({MAX_ARRAY_BYTES})")
            else:
                check(p.value, f"params[{j}].value", integer=p.dtype.startswith("int"))
                try:
                    problem = scalar_problem(p.dtype, p.arg(case)[1])
                except OverflowError:
                    problem = f"{p.value} overflows {p.dtype}"
                if problem:
                    raise SpecError(path, f"params[{j}].value", f"for case '{case.name}': {p.name} = {problem}")
        for key, formula in (("metrics.flops", w.flops), ("metrics.bytes", w.bytes),
                             ("workload.reduction", w.tolerance.reduction)):
            if formula is not None:
                check(formula, key, integer=False)
        problems = {name: _kernel_problem(w, k, case) for name, k in w.kernels.items()}
        if problems and all(problems.values()):
            name, problem = next(iter(problems.items()))
            raise SpecError(path, f"kernels.{name}", f"launch for case '{case.name}': {problem}; and no other "
                            "kernel of the workload can serve that case either")
        not_applicable += [(name, case.name, problem) for name, problem in problems.items() if problem]
    for name in w.kernels:  # as the evaluator judges a candidate (agent/spec/applicability.py)
        skipped = {c: why for k, c, why in not_applicable if k == name}
        for timed, what in ((False, "correctness"), (True, "performance")):
            cases = [c for c in w.cases if c.timed == timed]
            if all(c.name in skipped for c in cases):
                raise SpecError(path, f"kernels.{name}", f"launch for case '{cases[0].name}': "
                                f"{skipped[cases[0].name]}; it serves no {what} case")
    return tuple(not_applicable)



def _rule_names(k: KernelSpec) -> set[str]:
    """Every name the kernel's launch arithmetic uses (each step's, its workspace sizes, its computed arguments)."""
    rules = [k.launch] + ([s.launch for s in k.program.steps if not isinstance(s, MemsetStep)] if k.program else [])
    exprs = [e for r in rules for e in (*r.grid, *r.block, r.shared, *r.cluster)]
    if k.program:
        exprs += [w.size for w in k.program.workspace]
        exprs += [a.expr for s in k.program.steps if not isinstance(s, MemsetStep) for a in s.args if a.expr is not None]
    return {n for e in exprs for n in e.names()}


def _kernel_problem(w: Workload, k: KernelSpec, case: Case) -> Optional[str]:
    """Why a shipped kernel cannot serve `case` at its defaults nor at any listed config, or None."""
    knobs = k.knobs()
    problem = None
    settings: tuple[dict[str, int], ...] = ({},) + k.configs
    for config in settings:
        env = {**case.sizes, **{n: kn.default for n, kn in knobs.items()}, **k.defines, **config}
        try:
            problem = (program_problem(w, k.program, case, env) if k.program else None) or k.launch.resolve(env).problems()
        except ExprError as e:
            problem = str(e)
        if problem is None:
            return None
    return problem
