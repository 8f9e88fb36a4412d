"""A workload's ``[[params]]`` tables: arrays (dtype, shape, how inputs are drawn: range,
distribution, structure) and scalars (dtype, value), in the kernel's argument order,
each checked as it is read.
"""

from __future__ import annotations

import math

import numpy as np

from .half_float import NARROW_FORMATS, is_narrow, round_to
from .toml_reader import Table, TomlReader
from .workload_model import (
    ARRAY_DTYPES,
    DISTRIBUTIONS,
    FLOAT_DTYPES,
    INPUT_ONLY_DTYPES,
    SCALAR_DTYPES,
    SQUARE_STRUCTURES,
    STRUCTURES,
    VALUE_STRUCTURES,
    ArrayParam,
    Param,
    ScalarParam,
)

ARRAY_ROLES = ("input", "output")


def parse_params(toml: TomlReader, items: list[Table]) -> tuple[Param, ...]:
    params: list[Param] = []
    seen = set()
    for i, p in enumerate(items):
        where = f"params[{i}]."
        if not isinstance(p, dict):
            raise toml.fail(f"params[{i}]", "each parameter is a table")
        toml.known(p, where, {"name", "role", "dtype", "shape", "range", "value", "allow_nonfinite", "distribution",
                              "structure", "density"})
        name = toml.name(p, where)
        if not name.isidentifier() or name in seen:
            raise toml.fail(where + "name", f"'{name}' is not a unique identifier")
        seen.add(name)
        role = toml.get(p, "role", where, str)
        dtype = toml.get(p, "dtype", where, str)
        if role == "scalar":
            drawn = next((k for k in ("distribution", "structure", "density") if k in p), None)
            if drawn:
                raise toml.fail(where + drawn, "only an input is drawn (a scalar has its value)")
            if dtype not in SCALAR_DTYPES:
                raise toml.fail(where + "dtype", f"scalar dtype must be one of {', '.join(SCALAR_DTYPES)}")
            params.append(ScalarParam(name, dtype, toml.expr(toml.get(p, "value", where, (str, int, float)),
                                                             where + "value")))
            continue
        params.append(_array(toml, p, where, name, role, dtype))
    if not any(isinstance(p, ArrayParam) and p.role == "output" for p in params):
        raise toml.fail("params", "no parameter has role = \"output\"")
    return tuple(params)


def _array(toml: TomlReader, p: Table, where: str, name: str, role: str, dtype: str) -> ArrayParam:
    if role not in ARRAY_ROLES:
        raise toml.fail(where + "role", f"'{role}' must be input, output or scalar")
    if dtype not in ARRAY_DTYPES:
        raise toml.fail(where + "dtype", f"'{dtype}' must be one of {', '.join(ARRAY_DTYPES)}")
    if dtype in INPUT_ONLY_DTYPES and role == "output":
        # An output is poisoned in words the kernel cannot predict and compared on the GPU
        # in 16 or 32 bits; an 8-bit format has two NaNs and a handful of huge values.
        raise toml.fail(where + "dtype", f"{dtype} is an input dtype here: write the output in "
                        + ("int32" if dtype == "bool" else "bfloat16, float16 or float32")
                        + " (outputs are poisoned and checked in words of 16 bits or more)")
    shape = toml.get(p, "shape", where, list)
    if not shape:
        raise toml.fail(where + "shape", "needs at least one dimension")
    distribution = toml.get(p, "distribution", where, str, "uniform")
    structure = toml.get(p, "structure", where, str, "")
    _check_drawing(toml, p, where, role, dtype, distribution, structure, len(shape))
    density = _density(toml, p, where, dtype, structure)
    bounds = toml.get(p, "range", where, list, [-1.0, 1.0]) if role == "input" else [-1.0, 1.0]
    if dtype == "bool" or structure in VALUE_STRUCTURES:
        bounds = [0.0, 1.0] if dtype == "bool" or structure == "mask" else [-1.0, 1.0]
    if len(bounds) != 2 or not all(isinstance(b, str) or (isinstance(b, (int, float)) and not isinstance(b, bool)
                                                          and math.isfinite(b)) for b in bounds):
        raise toml.fail(where + "range", "expected [low, high], each a finite number or an expression of the "
                        f"sizes, got {bounds!r}")
    if any(isinstance(b, str) for b in bounds) and not dtype.startswith("int"):
        raise toml.fail(where + "range", "only an integer input's range may follow the sizes (indices below a "
                        f"size), got {bounds!r}")
    low, high = (toml.expr(b, where + "range") for b in bounds)
    if not (low.names() or high.names()):  # numbers: checked now; expressions on every case (workload_checks)
        problem = range_problem(dtype, structure, low.evaluate({}), high.evaluate({}))
        if problem:
            raise toml.fail(where + "range", problem)
    nonfinite = toml.get(p, "allow_nonfinite", where, bool, False)
    if nonfinite and (role != "output" or dtype not in FLOAT_DTYPES):
        raise toml.fail(where + "allow_nonfinite", "only a float output's reference may hold NaN or inf")
    return ArrayParam(name, role, dtype, tuple(toml.expr(d, f"{where}shape[{j}]") for j, d in enumerate(shape)),
                      low, high, nonfinite, distribution, structure, density)


def range_problem(dtype: str, structure: str, low: float, high: float) -> str:
    """What is wrong with drawing an input of `dtype` from [low, high] ('' when nothing is)."""
    if not low < high:
        return f"expected low < high, got [{low:g}, {high:g}]"
    if is_narrow(dtype):
        fmt = NARROW_FORMATS[dtype]  # drawn from [low, high] and rounded once to dtype
        if max(abs(low), abs(high)) > fmt.max_finite:
            return f"[{low:g}, {high:g}] reaches beyond {dtype}'s largest value (+-{fmt.max_finite:.6g})"
        if not round_to(np.array([low, high]), dtype).any():
            return f"[{low:g}, {high:g}] holds no non-zero {dtype} value (inputs are never zero)"
    if dtype.startswith("int") and structure not in VALUE_STRUCTURES:
        info = {"int32": 2**31, "int64": 2**63}[dtype]
        lo, hi = math.ceil(low), math.floor(high)
        if lo > hi or (lo == hi == 0) or lo < -info or hi >= info:
            return f"holds no non-zero {dtype} value (inputs are never zero)"
    if structure == "rows_sum_to_1" and low < 0:
        return (f"[{low:g}, {high:g}]: rows_sum_to_1 divides each row of draws by its sum, so the draws are "
                "non-negative (low >= 0)")
    return ""


def _density(toml: TomlReader, p: Table, where: str, dtype: str, structure: str) -> float:
    """A two-valued input's share of True (bool), of 1 (mask) or of +1 (sign): 0.5 unless said."""
    if "density" not in p:
        return 0.5
    if dtype != "bool" and structure not in VALUE_STRUCTURES:
        raise toml.fail(where + "density", "only a bool input or a mask or sign structure has a density "
                        "(the share of True, of 1 or of +1)")
    density = toml.get(p, "density", where, (int, float))
    if isinstance(density, bool) or not 0 < density < 1:
        raise toml.fail(where + "density", f"{density!r} must be a number strictly between 0 and 1")
    return float(density)


def _check_drawing(toml: TomlReader, p: Table, where: str, role: str, dtype: str, distribution: str, structure: str,
                   rank: int) -> None:
    """`distribution` and `structure` (and `range` beside them) describe how an input is drawn."""
    for key in ("distribution", "structure", "density"):
        if key in p and role != "input":
            raise toml.fail(where + key, "only an input is drawn (outputs are written by the kernel)")
    if distribution not in DISTRIBUTIONS:
        raise toml.fail(where + "distribution", f"'{distribution}' must be one of {', '.join(DISTRIBUTIONS)}")
    if distribution == "normal":
        if dtype not in FLOAT_DTYPES:
            raise toml.fail(where + "distribution", f"a {dtype} input cannot be drawn from a normal distribution")
        if "range" in p:
            raise toml.fail(where + "range", "a normal input is drawn from N(0, 1); it takes no range")
    if structure and structure not in STRUCTURES:
        raise toml.fail(where + "structure", f"'{structure}' must be one of {', '.join(STRUCTURES)}")
    if structure and dtype == "bool":
        raise toml.fail(where + "structure", "a bool input holds False and True already; it takes no structure")
    if dtype == "bool" and role == "input" and "range" in p:
        raise toml.fail(where + "range", "a bool input holds False and True (their shares: density); it takes no range")
    if structure in VALUE_STRUCTURES and ("range" in p or distribution != "uniform"):
        values = "0 and 1" if structure == "mask" else "-1 and 1"
        raise toml.fail(where + ("range" if "range" in p else "distribution"),
                        f"structure = \"{structure}\" draws {values} (their shares: density); it takes no range or "
                        "distribution")
    if structure == "rows_sum_to_1" and (dtype not in FLOAT_DTYPES or distribution != "uniform"):
        raise toml.fail(where + "structure", "rows_sum_to_1 is for a float input drawn uniformly from its range")
    if structure in SQUARE_STRUCTURES and rank < 2:
        raise toml.fail(where + "structure", f"{structure} is a property of the last two dimensions: the input "
                        "needs two or more")
