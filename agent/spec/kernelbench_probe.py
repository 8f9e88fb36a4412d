"""The child of `warpsmith import`: loads a KernelBench-style problem (the user's code:
class Model(nn.Module), get_inputs(), get_init_inputs()) and reports what its
workload needs: the arrays (forward's inputs, the model's parameters and buffers, its
outputs) with their dtypes, their dimensions as expressions of the sizes, how to draw
the inputs (range or distribution, structure: kernelbench_values.py), the Python
numbers forward takes beside its tensors (scalars passed by value), smaller sizes the
Model was seen to run at (the correctness cases), and notes on what the workload does
not keep (a constant held at its own value, structure no workload key holds).

It runs in its own process under the parent's time limit, without secrets in its
environment (reference_run.run_child), and answers one JSON line: {"ok": true,
"probe": {...}} or {"error": "one line"}. The checks that need no PyTorch (Model and
the functions exist, inputs are tensors or numbers) come first, so a broken file is
refused the same way with or without it.

The problem runs at its own sizes on the meta device only (kernelbench_trace.py), so
an input warpsmith cannot hold (an int8 tensor, a bool output) is refused before
anything is allocated; the sizes and expressions come from kernelbench_sizes.py;
arithmetic runs on the CPU only at the smallest case.

    python -P -m warpsmith.agent.spec.kernelbench_probe < job.json
"""

from __future__ import annotations

import inspect
import keyword
import math
import re
import sys
from pathlib import Path

from .child_answer import answer_job
from .kernelbench_model import load_problem, problem_constants
from .kernelbench_sizes import plan_sizes
from .kernelbench_trace import (
    CPU_ELEMENTS,
    NotTensors,
    RunFailed,
    Shapes,
    inputs_at,
    is_number,
    model_state,
    real_run,
    shapes_at,
)
from .kernelbench_values import input_drawing, value_range

DTYPES = ("float32", "float64", "int32", "int64", "bool")
OUTPUT_DTYPES = ("float32", "float64", "int32", "int64")
NEEDS_TORCH = "warpsmith import runs the problem with PyTorch, which is not installed: pip install torch"
RESERVED = {"ceil_div", "round_up", "min", "max"}  # function names of the expression language


class ProblemRefused(ValueError):
    """The problem file cannot become a workload; one line says why."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def _what(x) -> str:
    kind = type(x).__name__ if type(x).__module__ == "builtins" else f"{type(x).__module__}.{type(x).__name__}"
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _load(path: Path):
    try:
        return load_problem(path)
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise ProblemRefused(NEEDS_TORCH) from None
        raise ProblemRefused(f"{path.name}: importing it raised ModuleNotFoundError: {_one_line(e)}") from None
    except SyntaxError as e:
        raise ProblemRefused(f"{path.name}: line {e.lineno}: {e.msg}") from None
    except Exception as e:  # the user's code: one line, not its traceback
        raise ProblemRefused(f"{path.name}: loading it raised {type(e).__name__}: {_one_line(e)}") from None


def _call(path: Path, what: str, fn):
    try:
        return fn()
    except Exception as e:
        raise ProblemRefused(f"{path.name}: {what} raised {type(e).__name__}: {_one_line(e)}") from None


def _functions(path: Path, module) -> None:
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not callable(getattr(module, n, None))]
    if missing:
        raise ProblemRefused(f"{path.name} defines no {', '.join(missing)}: a KernelBench-style problem defines "
                             "class Model(nn.Module), get_inputs() and get_init_inputs()")


def _not_tensors(path: Path, inputs) -> str:
    """Why get_inputs()'s answer is no list of tensors (and Python numbers), or ''."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        return f"{path.name}: get_inputs() returned {_what(inputs)}; it must return a non-empty list of tensors"
    torch = sys.modules.get("torch")  # the problem imported it, if it makes tensors at all
    for i, x in enumerate(inputs):
        if not is_number(x) and (torch is None or not isinstance(x, torch.Tensor)):
            return (f"{path.name}: get_inputs() returned {_what(x)} at position {i}; every input must be a "
                    "torch.Tensor or a Python number (put other arguments in get_init_inputs() or the Model)")
    if torch is None or not any(isinstance(x, torch.Tensor) for x in inputs):
        return f"{path.name}: get_inputs() returned only Python numbers; it must return a tensor too"
    return ""


def _traced(path: Path, module) -> Shapes:
    """The problem at its own sizes on the meta device: nothing allocated, so a problem
    warpsmith cannot take is refused before it could fill the memory."""
    if "torch" not in sys.modules:  # no tensors can come: get_inputs() runs as it is, to say what it returns
        raise ProblemRefused(_not_tensors(path, _call(path, "get_inputs()", module.get_inputs)) or NEEDS_TORCH)
    try:
        return shapes_at(path, {})
    except RunFailed as e:
        if isinstance(e.error, NotTensors) and e.phase == "Model.forward":
            raise ProblemRefused(f"{path.name}: forward returned {_what(e.error.value)}; it must return tensors") \
                from None
        if isinstance(e.error, NotTensors):  # what get_inputs() made on the meta device: nothing allocated
            raise ProblemRefused(_not_tensors(path, e.error.value) or f"{path.name}: {e}") from None
        raise ProblemRefused(f"{path.name}: {e}") from None


def _dtype(path: Path, what: str, dtype: str, held: tuple[str, ...] = DTYPES) -> str:
    if dtype not in held:
        kind = "outputs" if held == OUTPUT_DTYPES else "workloads"
        raise ProblemRefused(f"{path.name}: {what} is {dtype}; warpsmith {kind} hold {', '.join(held)}")
    return dtype


class _Names:
    """Kernel parameter names: identifiers, unique, no Python keyword, no function of the
    expression language."""

    def __init__(self):
        self.taken: set[str] = set()

    def claim(self, wanted: str, fallback: str) -> str:
        name = wanted if wanted.isidentifier() and wanted.isascii() else fallback
        if keyword.iskeyword(name) or name in RESERVED or not name[0].isalpha():
            name = fallback
        base, i = name, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name


def _forward_names(module, count: int) -> list[str]:
    try:
        params = list(inspect.signature(module.Model.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    plain = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return plain[:count] if len(plain) >= count else [f"x{i}" for i in range(count)]


def probe(path: Path) -> dict:
    module = _load(path)
    _functions(path, module)
    base = _traced(path, module)
    import torch
    for i, (shape, dtype) in enumerate(base.inputs):
        if i in base.scalars:
            continue
        _dtype(path, f"get_inputs()[{i}]", dtype)
        if not shape or 0 in shape:
            raise ProblemRefused(f"{path.name}: get_inputs()[{i}] has shape {shape}; inputs need one dimension or "
                                 "more, none of them 0")
    for key, (_, dtype) in base.state.items():
        _dtype(path, f"the model's {key}", dtype)
    constants = {k: v for k, v in problem_constants(path.read_text(encoding="utf-8-sig")).items()
                 if k.isidentifier() and k.isascii() and k not in RESERVED and not keyword.iskeyword(k)}
    plan = plan_sizes(path, constants, base)
    at = plan.cases[0] if plan.cases else {}
    traced = shapes_at(path, plan.constants(at)) if plan.cases else base
    if traced.outputs is None or _elements(traced) > CPU_ELEMENTS:
        raise ProblemRefused(f"{path.name}: the Model runs at no sizes smaller than its own ({_elements(traced)} "
                             "elements), too large for its reference on the CPU; " + "; ".join(plan.notes))
    real = _call(path, "the Model on the CPU", lambda: real_run(path, plan.constants(at)))
    for i, (_, dtype) in enumerate(traced.outputs):
        _dtype(path, f"output {i}", dtype, OUTPUT_DTYPES)
    # The parameters' ranges at the problem's own sizes where they are small (nn.Linear's bound
    # shrinks with its fan-in); else at the case's
    own = real.state if not plan.cases or sum(math.prod(s) for s, _ in base.state.values()) > CPU_ELEMENTS \
        else _call(path, "Model(*get_init_inputs()) on the CPU", lambda: model_state(path, {}))
    names = _Names()
    for s in plan.sizes:
        names.claim(s, s)
    arrays, scalars, notes = [], [], list(plan.notes)
    # a 0-dimensional parameter (nn.Parameter(torch.tensor(1.0))) is an array of one element
    dims = lambda kind, key, rank: [_dim(plan.dims[(kind, key, axis)]) for axis in range(rank)] or [1]
    # values (ranges, structure) from the largest correctness case: more of them than the smallest
    sample = _call(path, "get_inputs()", lambda: inputs_at(path, plan.constants(plan.cases[-1]))) \
        if len(plan.cases) > 1 else real.inputs
    for i, name in enumerate(_forward_names(module, len(base.inputs))):
        name = names.claim(name, f"x{i}")
        if i in base.scalars:
            scalars.append(_scalar(name, i, base))
            notes += [n for n in [_scalar_note(name, base.scalars[i], sample[i])] if n]
            continue
        drawing, lost = input_drawing(name, sample[i], base.bounds[i], base.draws[i])
        if i in plan.bounds:  # indices below a size: their bounds follow it in every case
            drawing["low"], drawing["high"] = (int(e) if e.lstrip("-").isdigit() else e for e in plan.bounds[i])
        arrays.append({"name": name, "role": "input", "dtype": base.inputs[i][1],
                       "dims": dims("input", i, len(base.inputs[i][0])), **drawing})
        notes += [lost] if lost else []
    for key, (shape, dtype) in base.state.items():
        low, high = value_range(own[key])
        arrays.append({"name": names.claim(key.replace(".", "_"), f"p{len(arrays)}"), "role": "input",
                       "dtype": dtype, "dims": dims("state", key, len(shape)), "low": low, "high": high,
                       "state_key": key})
    outs = traced.outputs
    for i, (shape, dtype) in enumerate(outs):
        name = names.claim("out" if len(outs) == 1 else f"out{i}", f"out{i}")
        arrays.append({"name": name, "role": "output", "dtype": dtype, "dims": dims("output", i, len(shape))})
    order = _first_use(arrays, plan.sizes)
    doc = inspect.getdoc(module.Model) or ""
    return {"arrays": arrays, "scalars": scalars, "sizes": {s: plan.sizes[s] for s in order},
            "cases": [{s: c[s] for s in order} for c in plan.cases], "notes": notes, "tied": plan.tied,
            "doc": doc if doc != inspect.getdoc(torch.nn.Module) else ""}


def _scalar(name: str, position: int, base: Shapes) -> dict:
    """A Python number among forward's inputs: a scalar the kernel takes by value, the
    problem's own value in every case; a float is float32 unless a float input is float64."""
    value = base.scalars[position]
    if type(value) is float:
        wide = any(dtype == "float64" for i, (_, dtype) in enumerate(base.inputs) if i not in base.scalars)
        return {"name": name, "position": position, "dtype": "float64" if wide else "float32", "value": value}
    return {"name": name, "position": position, "dtype": "int32" if -2**31 <= value < 2**31 else "int64",
            "value": value}


def _scalar_note(name: str, value, smaller) -> str:
    if smaller == value:
        return ""
    return f"{name}: get_inputs() makes it {value!r} at the problem's sizes and {smaller!r} at smaller ones; " \
        f"the workload keeps {value!r} in every case"


def _dim(text):
    return int(text) if isinstance(text, int) or text.lstrip("-").isdigit() else text


def _elements(shapes: Shapes) -> int:
    return sum(math.prod(s) for s, _ in (*shapes.inputs, *shapes.state.values(), *(shapes.outputs or ())))


def _first_use(arrays: list, sizes: dict) -> list:
    """The sizes in the order the arrays' dimensions first name them (the kernel's arguments)."""
    order: list = []
    for a in arrays:
        for d in a["dims"]:
            if isinstance(d, str):
                order += [n for n in re.findall(r"[A-Za-z_]\w*", d) if n in sizes and n not in order]
    return order + [n for n in sizes if n not in order]


def main() -> int:
    return answer_job(lambda job: {"probe": probe(Path(job["problem"]))}, ProblemRefused,
                      lambda job: f"{Path(job['problem']).name}: out of host memory")

if __name__ == "__main__":
    sys.exit(main())
