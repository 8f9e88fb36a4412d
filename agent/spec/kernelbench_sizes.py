"""Which of a KernelBench-style problem's constants are sizes, every array dimension as
an expression of them, and the smaller cases: for the probe (kernelbench_probe.py),
from runs on the meta device (kernelbench_trace.py).

A constant is a size when changing it changes some array's shape: any constant that
shapes an input, and one of MIN_SIZE or more that shapes a parameter or an output
(out_channels, hidden sizes), so kernel_size, stride or padding stay the problem's
own. The bounds of get_inputs()' torch.randint draws are fitted like dimensions, so
indices below a size (CrossEntropyLoss's classes) follow it in every case. Equal
values mean nothing: each constant is moved on its own. A constant that shapes an
input but stops the Model when it alone moves is tried together with each other
constant of its value; where the Model runs when they move together, they are tied:
one size, named after the first, the other following it (HingeLoss's `batch_size` and
`input_shape`, which broadcasting makes equal). A size stays fixed (and is named in a
note) where the Model does not run when it alone changes, or where a dimension or a
torch.randint bound follows it in a way shape_fit cannot write.

The smallest case the Model runs at (real arithmetic on the CPU, in float64, as the
reference will) is the first correctness case and the point the sizes are moved
around, one at a time, to fit each dimension; a second, larger case and the problem's
own sizes must then meet every expression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .cpu_budget import MAX_ELEMENTS
from .expr import Expr
from .kernelbench_trace import CPU_ELEMENTS, DimKey, RunFailed, Shapes, real_run, shapes_at
from .shape_fit import fit_dim

Sizes = dict[str, int]

MIN_SIZE = 16
PRIMES = tuple(p for p in range(3, 1000) if all(p % d for d in range(2, int(p ** 0.5) + 1)))
# Each size moves from the smallest case through SWEEP consecutive values (every remainder of a
# stride), multiples of its value there (which keep a divisor: GroupNorm's groups) and a few far off.
SWEEP = 24
ALONE = "the Model does not run when it alone changes"
UNWRITTEN = "the dimension"
ATTEMPTS = 6  # rounds of fitting, each after fixing the sizes the last one could not write


@dataclass(frozen=True)
class SizePlan:
    sizes: Sizes  # size name -> the problem's value, in file order
    dims: dict[DimKey, str]  # every array dimension (not "rank") -> its expression
    cases: list[Sizes] = field(default_factory=list)  # smaller cases, smallest first
    notes: list[str] = field(default_factory=list)  # constants kept at their own value, and why
    tied: dict[str, str] = field(default_factory=dict)  # constant -> the size it moves with
    # input index -> its torch.randint's [low, high] as expressions, where one follows a size
    bounds: dict[int, tuple[str, str]] = field(default_factory=dict)

    def constants(self, case: Sizes) -> Sizes:
        return _with_ties(case, self.tied)


def _with_ties(case: Sizes, tied: dict[str, str]) -> Sizes:
    """A case's values for the problem's constants: its sizes and the constants tied to them."""
    return {**case, **{f: case[lead] for f, lead in tied.items() if lead in case}}


@dataclass(frozen=True)
class _Problem:
    """The problem file and its ties: runs at a case's sizes."""

    path: Path
    tied: dict[str, str] = field(default_factory=dict)

    def shapes(self, case: Sizes) -> Shapes:
        return shapes_at(self.path, _with_ties(case, self.tied))

    def runs(self, case: Sizes) -> bool:
        """The Model runs at `case` on the meta device and, small enough, for real on the CPU."""
        try:
            shapes = self.shapes(case)
            if shapes.outputs is None or _count(shapes) > CPU_ELEMENTS:
                return False
            real_run(self.path, _with_ties(case, self.tied))
            return True
        except Exception:  # the problem's code at other sizes: anything it raises means no
            return False


def _perturbed(v: int) -> list[int]:
    return [x for x in dict.fromkeys((v + 1, v - 1, 2 * v, v // 2)) if x >= 1 and x != v]


def _movers(path: Path, constants: Sizes, base: Shapes) -> tuple[list[str], list[str], dict[str, str]]:
    """The constants that shape arrays (candidates for sizes), notes on those kept, and ties
    (constant -> the candidate it moves with)."""
    before = base.dims()
    names: list[str] = []
    notes: list[str] = []
    tied: dict[str, str] = {}
    for name, v in constants.items():
        if v < 1 or name in tied:
            continue
        failed = ""
        for x in _perturbed(v):  # v +- 1 first; 2v and v // 2 keep a divisor (groups, heads)
            try:
                after = shapes_at(path, {name: x})
            except RunFailed as e:
                if e.inputs is not None and e.inputs != base.inputs:  # it shapes an input, but cannot move
                    failed = f"{name} stays {v}: the Model does not run when it alone changes ({e})"[:300]
                continue
            moved = {k for k in set(before) | set(after.dims()) if before.get(k) != after.dims().get(k)}
            if not moved:
                break
            if any(k[0] == "input" for k in moved) or v >= MIN_SIZE:
                names.append(name)
            break
        else:
            partner = _partner(path, constants, name, tied) if failed else None
            if partner is not None:
                lead, follower = (name, partner) if list(constants).index(name) < list(constants).index(partner) \
                    else (partner, name)
                tied[follower] = lead
                names = [n for n in names if n != follower] + ([lead] if lead not in names else [])
                notes.append(f"{follower} moves with {lead}: the Model runs only when they are equal")
            else:
                notes += [failed] if failed else []
    return [n for n in constants if n in names], notes, tied


def _ties(runs: _Problem, alone: list[str], names: list[str], constants: Sizes, base: Sizes) -> dict[str, str]:
    """Each size that cannot move alone, paired with another of its value that the Model runs
    with when both move (a depthwise convolution's in_channels and out_channels): follower ->
    lead, the lead the first in file order."""
    ties: dict[str, str] = {}
    for one in alone:
        for other in names:
            if one == other or {one, other} & (set(ties) | set(ties.values())) \
                    or constants[one] != constants[other] or base[one] != base[other]:
                continue
            try:
                runs.shapes({**base, one: base[one] + 1, other: base[one] + 1})
            except RunFailed:
                continue
            lead, follower = sorted((one, other), key=list(constants).index)
            ties[follower] = lead
    return ties


def _partner(path: Path, constants: Sizes, name: str, tied: dict[str, str]) -> Optional[str]:
    """Another constant of the same value the Model runs with when both move, or None."""
    v = constants[name]
    for other, w in constants.items():
        if other == name or w != v or other in tied:
            continue
        try:
            shapes_at(path, {name: v + 1, other: v + 1})
            return other
        except RunFailed:
            continue
    return None


def _ladder(values: Sizes) -> list[Sizes]:
    """Smaller cases to try, smallest first: distinct small primes (in the sizes' order,
    so a kernel that swaps two sizes goes wrong), then the sizes divided down, odd
    (catching the kernels that assume a multiple) and then whole (for the Models that
    need a divisor kept: heads, groups)."""
    order = sorted(values, key=lambda n: values[n])
    out = []
    for start in (3, 11, 29, 61):
        primes = iter(p for p in PRIMES if p >= start)
        out.append({n: min(values[n], next(primes)) for n in order})
    for d in (64, 32, 16, 8, 4, 3, 2):
        out.append({n: min(values[n], max(3, values[n] // d) | 1) for n in order})
        out.append({n: max(1, values[n] // d) for n in order})
    unique = []
    for case in out:
        case = {n: case[n] for n in values}
        if case != values and case not in unique:
            unique.append(case)
    return unique


def _elements(dims: dict[DimKey, str], case: Sizes) -> int:
    shapes: dict[tuple[str, int | str], list[int]] = {}
    for (kind, key, _), e in dims.items():
        if kind == "bound":
            continue
        shapes.setdefault((kind, key), []).append(Expr.parse(e).evaluate_int(case))
    return sum(math.prod(shape) for shape in shapes.values())


def _count(shapes: Shapes) -> int:
    return sum(math.prod(shape) for shape, _ in (*shapes.inputs, *shapes.state.values(), *(shapes.outputs or ())))


def _observed(shapes: Shapes) -> dict[DimKey, int]:
    """Every dimension, and the low and high bound of each torch.randint input ("bound", i, "low")."""
    bounds = [(i, b) for i, b in enumerate(shapes.bounds) if b is not None]
    return {**shapes.dims(), **{("bound", i, end): v for i, b in bounds for end, v in zip(("low", "high"), b)}}


def _meets(dims: dict[DimKey, str], shapes: Shapes, case: Sizes) -> bool:
    seen = _observed(shapes)
    return all(seen[k] == Expr.parse(e).evaluate_int(case) for k, e in dims.items() if k in seen)


def _fit(runs: _Problem, names: list[str], base_case: Sizes, problem: Sizes,
         base: Shapes) -> tuple[dict[DimKey, str], dict[str, str]]:
    """Every dimension's expression, or the sizes to fix (with why) when some cannot be written."""
    start = runs.shapes(base_case)
    at_base = _observed(start)
    sweeps: dict[DimKey, dict[str, list[tuple[int, int]]]] = {k: {n: [] for n in names} for k in at_base}
    fix: dict[str, str] = {}
    for n in names:
        b = base_case[n]
        for x in dict.fromkeys([*range(b, b + SWEEP), 2 * b, 3 * b, 4 * b, 2 * b + 1, 3 * b + 2, 4 * b + 3, 8 * b + 5]):
            try:
                shapes = runs.shapes({**base_case, n: x})
            except RunFailed:
                continue
            seen = _observed(shapes)
            if set(seen) != set(at_base):
                fix[n] = "the arrays change in number or rank when it changes"
                break
            for k, v in seen.items():
                sweeps[k][n].append((x, v))
        if n not in fix and len(sweeps[next(iter(at_base))][n]) < 3:
            fix[n] = ALONE
    joint: list[tuple[Sizes, Optional[Shapes]]] = [({n: base_case[n] + 2 for n in names}, None), (problem, base)]
    points = []
    for case, known in joint:
        try:
            points.append((case, _observed(known or runs.shapes(case))))
        except RunFailed:
            continue
    dims: dict[DimKey, str] = {}
    for k, v in at_base.items():
        if k[2] == "rank":
            continue
        found = fit_dim(base_case, v, sweeps[k], [(c, d[k]) for c, d in points if k in d])
        if found is None:
            for n, pts in sweeps[k].items():
                if len({y for _, y in pts}) > 1:
                    fix.setdefault(n, f"get_inputs() draws input {k[1]} below it in a way warpsmith cannot write"
                                   if k[0] == "bound" else
                                   f"{UNWRITTEN} {_named(k)} follows it in a way warpsmith cannot write")
        else:
            dims[k] = found
    return dims, fix


def _bounds(dims: dict[DimKey, str]) -> dict[int, tuple[str, str]]:
    """Per torch.randint input whose bounds follow a size: (low, high) as expressions."""
    inputs = {int(key) for kind, key, _ in dims if kind == "bound"}
    pairs = {i: (dims[("bound", i, "low")], dims[("bound", i, "high")]) for i in inputs}
    return {i: pair for i, pair in pairs.items() if any(Expr.parse(e).names() for e in pair)}


def _named(key: DimKey) -> str:
    kind, name, axis = key
    return f"{axis} of {'input ' + str(name) if kind == 'input' else 'output ' + str(name) if kind == 'output' else name}"


def plan_sizes(path: Path, constants: Sizes, base: Shapes) -> SizePlan:
    """The sizes, the dimensions as expressions of them, the smaller cases."""
    names, notes, tied = _movers(path, constants, base)
    runs = _Problem(path, tied)
    for _ in range(ATTEMPTS):
        problem = {n: constants[n] for n in names}
        plain = {k: str(v) for k, v in base.dims().items() if k[2] != "rank"}
        if not names:
            return SizePlan({}, plain, [], notes)
        tiny = next((c for c in _ladder(problem) if runs.runs(c)), None)
        if tiny is None:
            notes += [f"{n} stays {constants[n]}: the Model runs at no smaller sizes" for n in names]
            return SizePlan({}, plain, [], notes)
        dims, fix = _fit(runs, names, tiny, problem, base)
        if not fix:
            sizes = {n: constants[n] for n in names}
            cases = [tiny] + _medium(runs, dims, names, tiny, problem)
            arrays = {k: e for k, e in dims.items() if k[0] != "bound"}
            return SizePlan(sizes, arrays, cases, notes, {f: lead for f, lead in tied.items() if lead in sizes},
                            _bounds(dims))
        ties = _ties(runs, [n for n, why in fix.items() if why == ALONE], names, constants, tiny)
        if ties:
            tied.update(ties)
            runs = _Problem(path, tied)
            notes += [f"{f} moves with {lead}: the Model runs only when they are equal" for f, lead in ties.items()]
            names = [n for n in names if n not in ties]
            continue
        # a size that breaks the arrays or cannot move alone first: the others' fits may hold without it
        first = {n: why for n, why in fix.items() if not why.startswith(UNWRITTEN)} or fix
        notes += [f"{n} stays {constants[n]}: {why}" for n, why in first.items()]
        names = [n for n in names if n not in first]
    notes += [f"{n} stays {constants[n]}: its dimensions could not be written as expressions" for n in names]
    return SizePlan({}, {k: str(v) for k, v in base.dims().items() if k[2] != "rank"}, [], notes)


def _medium(runs: _Problem, dims: dict[DimKey, str], names: list[str], tiny: Sizes, problem: Sizes) -> list[Sizes]:
    """A second correctness case, larger than the first and cheap enough on the CPU, where
    every expression holds."""
    for case in reversed(_ladder(problem)):  # the largest that is cheap: more blocks, more tails
        if case == tiny or any(case[n] < tiny[n] for n in names) or _elements(dims, case) > MAX_ELEMENTS:
            continue
        try:
            if _meets(dims, runs.shapes(case), case):
                return [case]
        except RunFailed:
            continue
    return []
