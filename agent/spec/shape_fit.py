"""An array dimension as an expression of the sizes, found from the shapes a model
gave at chosen sizes (agent/spec/kernelbench_trace.py runs it there).

One size at a time: the dimension's values as that size moves, the others held, fit
``(a*s + b) // c`` with small whole a, b, c: a size itself, a multiple, a
convolution's or pooling's output length ``(s + 2p - k) // stride + 1``, a transposed
convolution's ``stride*s + b``. A dimension moved by several sizes is their fits'
sum or product (a flattened ``C * (H // 2) * (W // 2)``), checked at points where
every size moved at once. What fits none of these is None: the caller keeps those
sizes fixed instead of guessing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional, Sequence

from .expr import Expr, ExprError

MAX_DIVISOR = 16  # the largest c tried: strides and pooling windows are smaller


@dataclass(frozen=True)
class Affine:
    """(a * size + b) // c."""

    size: str
    a: int
    b: int
    c: int

    def __call__(self, x: int) -> int:
        return (self.a * x + self.b) // self.c

    def text(self) -> str:
        term = self.size if self.a == 1 else f"{self.a} * {self.size}"
        line = term if self.b == 0 else f"{term} {'+' if self.b > 0 else '-'} {abs(self.b)}"
        return line if self.c == 1 else f"{line} // {self.c}" if self.b == 0 and self.a == 1 else f"({line}) // {self.c}"


def fit_one(size: str, points: Sequence[tuple[int, int]]) -> Optional[Affine]:
    """The smallest-divisor (a*x + b) // c through every (x, y), x the size's value; None
    when there are fewer than three distinct x or nothing fits."""
    return next(candidates(size, points), None)


def candidates(size: str, points: Sequence[tuple[int, int]]) -> Iterator[Affine]:
    """Every (a*x + b) // c through the points, smallest c first (sparse points can admit
    more than one: the caller checks them at points of its own)."""
    seen: dict[int, int] = {}
    if any(seen.setdefault(x, y) != y for x, y in points) or len(seen) < 3:
        return
    lo, hi = min(points), max(points)
    slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
    for c in range(1, MAX_DIVISOR + 1):
        for a in sorted({math.floor(slope * c), math.ceil(slope * c)}):
            if a == 0:
                continue
            # c*y <= a*x + b < c*y + c for every point: b in one interval
            low = max(c * y - a * x for x, y in points)
            high = min(c * y - a * x + c - 1 for x, y in points)
            if low <= high:
                yield Affine(size, a, 0 if low <= 0 <= high else (low if abs(low) <= abs(high) else high), c)


def _factor(size: str, points: Sequence[tuple[int, int]]) -> Optional[tuple[Affine, int]]:
    """The sweep's values as g * fit(x), g their common divisor."""
    g = math.gcd(*(y for _, y in points))
    fit = fit_one(size, [(x, y // g) for x, y in points]) if g else None
    return (fit, g) if fit is not None else None


def fit_dim(base: Mapping[str, int], value: int, sweeps: Mapping[str, Sequence[tuple[int, int]]],
            joint: Sequence[tuple[Mapping[str, int], int]]) -> Optional[str]:
    """The dimension as an expression of the sizes, or None.

    base: the sizes where the dimension is `value`; sweeps: per size, (x, dimension) with
    that size at x and the others at base (a size the dimension does not follow has one
    value there); joint: (sizes, dimension) pairs where several sizes moved at once,
    which the expression must meet too."""
    moving = {s: pts for s, pts in sweeps.items() if len({y for _, y in pts}) > 1}
    if not moving:
        return str(value) if all(y == value for _, y in joint) else None
    forms: list[str] = []
    if len(moving) == 1:
        (s, pts), = moving.items()
        forms += [f.text() for f in candidates(s, pts)]
        scaled = _factor(s, pts)  # a multiple of a floor: 2 * (D // 2) after pooling and upsampling
        if scaled is not None and scaled[1] > 1:
            forms.append(f"{scaled[1]} * ({scaled[0].text()})")
    fits = {s: fit_one(s, pts) for s, pts in moving.items()}
    if all(f is not None for f in fits.values()):
        # a whole-step term's own offset goes to the one constant of the sum
        single = [Affine(f.size, f.a, 0, 1) if f.c == 1 else f for f in fits.values() if f is not None]
        rest = value - sum(f(base[f.size]) for f in single)
        forms.append(" + ".join(f.text() for f in single) + (f" + {rest}" if rest > 0 else f" - {-rest}" if rest else ""))
    factors = {s: _factor(s, pts) for s, pts in moving.items()}
    if len(moving) > 1 and all(f is not None for f in factors.values()):
        parts = [f[0] for f in factors.values() if f is not None]
        at_base = math.prod(f(base[f.size]) for f in parts)
        if at_base and value % at_base == 0:
            k = value // at_base
            forms.append(" * ".join(([str(k)] if k != 1 else []) + [f"({f.text()})" if f.c > 1 or f.b else f.text()
                                                                    for f in parts]))
    every = [(dict(base), value)] + [({**base, s: x}, y) for s, pts in sweeps.items() for x, y in pts] + \
        [(dict(sizes), y) for sizes, y in joint]
    for form in forms:
        if _meets(form, every):
            return form
    return None


def _meets(form: str, points: Sequence[tuple[Mapping[str, int], int]]) -> bool:
    try:
        e = Expr.parse(form)
        return all(e.evaluate_int(sizes) == y for sizes, y in points)
    except ExprError:
        return False
