"""What the probe of a KernelBench-style problem (kernelbench_probe.py, the child that runs
the problem) answers, as records checked as data before any of it names a file or
becomes code: the arrays, the Python numbers forward takes, the sizes, the cases; and
the starting kernel the user gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from .expr import Expr, ExprError
from .workload_model import DISTRIBUTIONS, STRUCTURES, name_problem

ITEMSIZE = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}
SCALAR_DTYPES = ("float32", "float64", "int32", "int64")


class ImportRefused(ValueError):
    """The problem (or the arguments) cannot make a workload; one line says why."""


@dataclass(frozen=True)
class StartKernel:
    """--kernel FILE with its entry and launch rule (expressions of the sizes)."""

    path: Path
    entry: str
    grid: tuple[str, ...]
    block: tuple[str, ...]
    shared: str = "0"


@dataclass(frozen=True)
class ProblemArray:
    name: str  # the kernel parameter's name
    role: str  # input | output
    dtype: str
    dims: tuple[str | int, ...]  # expressions of the sizes, or literal extents
    # inputs: drawn uniformly from [low, high]; an integer input's bound may be an expression
    # of the sizes (indices below one)
    low: float | str = -1.0
    high: float | str = 1.0
    state_key: str = ""  # the model's parameter or buffer this input stands for
    distribution: str = "uniform"  # inputs: "normal" for torch.randn's
    structure: str = ""  # inputs: kept in every case (workload_model.STRUCTURES)
    density: float = 0.5  # bool, mask and sign inputs: the share of True, of 1 or of +1


@dataclass(frozen=True)
class ProblemScalar:
    """A Python number among forward's inputs: the kernel takes it by value."""

    name: str
    position: int  # among forward's inputs
    dtype: str  # float32 | float64 | int32 | int64
    value: Union[bool, int, float]  # the problem's own, in every case


@dataclass(frozen=True)
class ProblemProbe:
    """What the probe found: arrays in the kernel's order and sizes (the problem's constants
    that shape them, with its values, in order of first use), the smaller sizes the Model ran
    at, what the workload does not keep of the problem (notes, one line each), its docstring,
    and the Python numbers forward takes beside its tensors."""

    arrays: tuple[ProblemArray, ...]
    sizes: dict[str, int]
    cases: tuple[dict[str, int], ...] = ()
    doc: str = ""
    notes: tuple[str, ...] = ()
    tied: dict[str, str] = field(default_factory=dict)  # a constant of the problem -> the size it equals
    scalars: tuple[ProblemScalar, ...] = ()

    @staticmethod
    def from_json(data: dict[str, Any]) -> "ProblemProbe":
        """The child's answer, checked as data before any of it names a file or becomes code
        (the problem's own code ran in that process). Raises ImportRefused."""
        try:
            probe = ProblemProbe(tuple(ProblemArray(**{**a, "dims": tuple(a["dims"])}) for a in data["arrays"]),
                                 dict(data["sizes"]), tuple(dict(c) for c in data["cases"]), str(data.get("doc", "")),
                                 tuple(str(n) for n in data.get("notes", ())), dict(data.get("tied", {})),
                                 tuple(ProblemScalar(**s) for s in data.get("scalars", ())))
        except (KeyError, TypeError, ValueError) as e:
            raise ImportRefused(f"the problem's probe answered something malformed ({e})") from None
        problem = probe.problem()
        if problem:
            raise ImportRefused(f"the problem's probe answered something malformed ({problem})")
        return probe

    def problem(self) -> Optional[str]:
        names = [a.name for a in self.arrays] + [s.name for s in self.scalars] + list(self.sizes)
        if any(not (isinstance(n, str) and n.isidentifier() and n.isascii()) or name_problem(n) for n in names) \
                or len(set(names)) != len(names):
            return f"names {names}"
        for a in self.arrays:
            if a.role not in ("input", "output") or a.dtype not in ITEMSIZE or not isinstance(a.state_key, str):
                return f"array {a.name}"
            if not all(_names_sizes(d, self.sizes) if isinstance(d, str) else type(d) is int and d >= 1
                       for d in a.dims):
                return f"dimensions of {a.name}: {a.dims}"
            if not all(_names_sizes(v, self.sizes) and a.dtype.startswith("int") if isinstance(v, str)
                       else isinstance(v, (int, float)) and math.isfinite(v) for v in (a.low, a.high)):
                return f"range of {a.name}"
            if a.distribution not in DISTRIBUTIONS or (a.structure and a.structure not in STRUCTURES):
                return f"drawing of {a.name}"
        forward = len([a for a in self.arrays if a.role == "input" and not a.state_key]) + len(self.scalars)
        for s in self.scalars:
            if s.dtype not in SCALAR_DTYPES or type(s.value) not in (bool, int, float) \
                    or not math.isfinite(s.value) or type(s.position) is not int or not 0 <= s.position < forward:
                return f"scalar {s.name}"
        if len({s.position for s in self.scalars}) != len(self.scalars):
            return "positions of the scalars"
        if not all(isinstance(f, str) and f.isidentifier() and lead in self.sizes for f, lead in self.tied.items()):
            return f"ties {self.tied}"
        for case in (self.sizes, *self.cases):
            if set(case) != set(self.sizes) or not all(type(v) is int and v >= 1 for v in case.values()):
                return f"sizes {case}"
        return None

    def forward_inputs(self) -> list[Union[ProblemArray, ProblemScalar]]:
        """forward's arguments in order: its input arrays with the Python numbers among them."""
        arrays = iter(a for a in self.arrays if a.role == "input" and not a.state_key)
        at = {s.position: s for s in self.scalars}
        count = len([a for a in self.arrays if a.role == "input" and not a.state_key]) + len(self.scalars)
        return [at[i] if i in at else next(arrays) for i in range(count)]

    def params(self) -> list[Union[ProblemArray, ProblemScalar]]:
        """The kernel's parameters before the sizes: forward's inputs, the model's state, the outputs."""
        return [*self.forward_inputs(), *(a for a in self.arrays if a.state_key),
                *(a for a in self.arrays if a.role == "output")]


def _names_sizes(dim: str, sizes: dict[str, int]) -> bool:
    """A dimension's expression parses and names only sizes."""
    try:
        return Expr.parse(dim).names() <= set(sizes)
    except ExprError:
        return False
