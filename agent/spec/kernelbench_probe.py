"""The child of `warpsmith import`: loads a KernelBench-style problem (the user's code:
class Model(nn.Module), get_inputs(), get_init_inputs()) and reports what its
workload needs: the arrays (forward's inputs, the model's parameters and buffers, its
outputs) with their dtypes, their dimensions as sizes, the ranges to draw inputs from,
and smaller sizes the Model was seen to run at (the correctness cases).

It runs in its own process under the parent's time limit, without secrets in its
environment (reference_run.run_child), and answers one JSON line: {"ok": true,
"probe": {...}} or {"error": "one line"}. The checks that need no PyTorch (Model and
the functions exist, inputs are tensors) come first, so a broken file is refused
the same way with or without it.

Sizes: every distinct input dimension of 2 or more is a size, named after the
problem's module-level int constant of that value when there is one (M, batch_size),
else n0, n1...; a dimension of 1 stays 1. Shapes are found on the meta device (no
arithmetic), or on the CPU where an operator has no meta kernel.

    python -P -m agent.spec.kernelbench_probe < job.json
"""

from __future__ import annotations

import inspect
import json
import keyword
import math
import sys
from pathlib import Path

from .kernelbench_model import build, load_problem, outputs_of, state_tensors

DTYPES = ("float32", "float64", "int32", "int64")
NEEDS_TORCH = "warpsmith import runs the problem with PyTorch, which is not installed: pip install torch"
RESERVED = {"ceil_div", "round_up", "min", "max"}  # function names of the expression language
SMALL = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)


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


def _inputs(path: Path, module) -> list:
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not callable(getattr(module, n, None))]
    if missing:
        raise ProblemRefused(f"{path.name} defines no {', '.join(missing)}: a KernelBench-style problem defines "
                             "class Model(nn.Module), get_inputs() and get_init_inputs()")
    inputs = _call(path, "get_inputs()", module.get_inputs)
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ProblemRefused(f"{path.name}: get_inputs() returned {_what(inputs)}; it must return a non-empty "
                             "list of tensors")
    torch = sys.modules.get("torch")  # the problem imported it, if it makes tensors at all
    for i, x in enumerate(inputs):
        if torch is None or not isinstance(x, torch.Tensor):
            raise ProblemRefused(f"{path.name}: get_inputs() returned {_what(x)} at position {i}; every input must "
                                 "be a torch.Tensor (put other arguments in get_init_inputs() or the Model)")
    return list(inputs)


def _dtype(path: Path, what: str, t) -> str:
    name = str(t.dtype).replace("torch.", "")
    if name not in DTYPES:
        raise ProblemRefused(f"{path.name}: {what} is {name}; warpsmith workloads hold {', '.join(DTYPES)}")
    return name


def _range(t) -> tuple[float, float]:
    """Where get_inputs()'s (or the model's) values lie, rounded outwards: inputs are drawn
    uniformly from it (never zero). A constant tensor (ones) gets +-1 around its value."""
    if t.numel() == 0:
        return -1.0, 1.0
    low, high = float(t.min()), float(t.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        return -1.0, 1.0
    if t.is_floating_point():
        low, high = math.floor(low * 100) / 100, math.ceil(high * 100) / 100
    if high - low < 1e-3:
        low, high = low - 1, high + 1
    return low, high


class _Names:
    """Kernel parameter and size names: identifiers, unique, no Python keyword, no function
    of the expression language."""

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


def _run(module, mapping: dict[int, int], shapes: list[tuple], dtypes: list, real_inputs=None):
    """Output shapes and dtypes of the Model built for `mapping`, on inputs of `shapes`:
    on the meta device, else on the CPU (with `real_inputs` where given)."""
    import torch
    try:
        model = build(module, mapping, device="meta")
        with torch.no_grad():
            return model, outputs_of(model(*(torch.empty(s, dtype=d, device="meta") for s, d in zip(shapes, dtypes))))
    except Exception:  # an operator without a meta kernel: the CPU does the arithmetic
        model = build(module, mapping)
        inputs = real_inputs or [torch.randn(s).to(d) if d.is_floating_point else torch.ones(s, dtype=d)
                                 for s, d in zip(shapes, dtypes)]
        with torch.no_grad():
            return model, outputs_of(model(*inputs))


def probe(path: Path) -> dict:
    module = _load(path)
    inputs = _inputs(path, module)
    import torch
    names = _Names()
    constants: dict[int, str] = {}
    for key, value in vars(module).items():  # definition order: the first name of a value wins
        if type(value) is int and not key.startswith("_"):
            constants.setdefault(value, key)
    arrays, sizes = [], {}
    by_value: dict[int, str] = {}
    input_names = [names.claim(n, f"x{i}") for i, n in enumerate(_forward_names(module, len(inputs)))]
    for i, (name, x) in enumerate(zip(input_names, inputs)):
        if x.dim() == 0 or 0 in x.shape:
            raise ProblemRefused(f"{path.name}: get_inputs()[{i}] has shape {tuple(x.shape)}; inputs need one "
                                 "dimension or more, none of them 0")
        for v in x.shape:
            if v >= 2 and v not in by_value:
                by_value[v] = sizes_name = names.claim(constants.get(v, ""), f"n{len(sizes)}")
                sizes[sizes_name] = v
    dims = lambda shape: [by_value.get(v, v) if v != 1 else 1 for v in shape]
    for name, x in zip(input_names, inputs):
        dtype = _dtype(path, f"input {name}", x)
        low, high = _range(x)
        arrays.append({"name": name, "role": "input", "dtype": dtype, "dims": dims(x.shape), "low": low, "high": high})
    model = _call(path, "Model(*get_init_inputs())", lambda: build(module, {}))
    for key, t in state_tensors(model).items():
        name = names.claim(key.replace(".", "_"), f"p{len(arrays)}")
        dtype = _dtype(path, f"the model's {key}", t)
        low, high = _range(t.detach())
        arrays.append({"name": name, "role": "input", "dtype": dtype, "dims": dims(t.shape), "low": low, "high": high,
                       "state_key": key})
    given = [tuple(x.shape) for x in inputs]
    kinds = [x.dtype for x in inputs]
    _, outs = _call(path, "Model.forward on get_inputs()", lambda: _run(module, {}, given, kinds, inputs))
    for i, t in enumerate(outs):
        if not isinstance(t, torch.Tensor):
            raise ProblemRefused(f"{path.name}: forward returned {_what(t)}; it must return tensors")
        name = names.claim("out" if len(outs) == 1 else f"out{i}", f"out{i}")
        arrays.append({"name": name, "role": "output", "dtype": _dtype(path, f"output {i}", t), "dims": dims(t.shape)})
    cases = [c for c in _smaller(sizes) if _runs_at(module, arrays, sizes, c)]
    doc = inspect.getdoc(module.Model) or ""
    return {"arrays": arrays, "sizes": sizes, "cases": cases, "doc": doc if doc != inspect.getdoc(torch.nn.Module) else ""}


def _smaller(sizes: dict[str, int]) -> list[dict[str, int]]:
    """Two smaller sets of sizes, each keeping the sizes' order and distinct values (the
    Model learns a case's sizes by value): small primes, and odd thirds."""
    order = sorted(sizes, key=sizes.get)
    out = []
    for pick in (lambda v, prev: min(v, next(p for p in SMALL + (prev + 1,) if p > prev)),
                 lambda v, prev: min(v, max(prev + 1, (v // 3) | 1))):
        new, prev = {}, 0
        for name in order:
            new[name] = prev = pick(sizes[name], prev)
        if new != sizes and new not in out:
            out.append({n: new[n] for n in sizes})
    return out


def _runs_at(module, arrays: list[dict], sizes: dict[str, int], case: dict[str, int]) -> bool:
    """The Model, built for `case`, takes inputs of the shapes the workload will give it and
    returns outputs of the shapes the workload expects, with parameters shaped alike."""
    import torch
    mapping = {sizes[n]: case[n] for n in sizes}
    shape = lambda a: tuple(case[d] if isinstance(d, str) else d for d in a["dims"])
    inputs = [a for a in arrays if a["role"] == "input" and "state_key" not in a]
    try:
        model, outs = _run(module, mapping, [shape(a) for a in inputs],
                           [getattr(torch, a["dtype"]) for a in inputs])
    except Exception:
        return False
    state = state_tensors(model)
    params_fit = all(tuple(state[a["state_key"]].shape) == shape(a) for a in arrays if "state_key" in a)
    outputs = [a for a in arrays if a["role"] == "output"]
    return params_fit and len(outs) == len(outputs) and all(tuple(t.shape) == shape(a) for t, a in zip(outs, outputs))


def main() -> int:
    job = json.loads(sys.stdin.read())
    from ..runtime.parent_watch import exit_with_parent
    exit_with_parent(job["parent"])
    answer_to = sys.stdout
    sys.stdout = sys.stderr  # the problem's prints must not look like the answer
    try:
        answer = {"ok": True, "probe": probe(Path(job["problem"]))}
    except ProblemRefused as e:
        answer = {"error": str(e)}
    except MemoryError:
        answer = {"error": f"{Path(job['problem']).name}: out of host memory"}
    print(json.dumps(answer), file=answer_to, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
