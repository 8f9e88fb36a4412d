"""The text of an imported workload's files (`warpsmith import`), from the probe's data
alone (nothing of the problem runs here): workload.toml, reference.py (the Model in
float64 on the CPU, with reference_memory(), what its PyTorch run holds besides the
arrays) and torch_baseline.py (the Model in PyTorch eager and torch.compile).
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Sequence

from .kernelbench_records import ITEMSIZE, ProblemArray, ProblemProbe, ProblemScalar, StartKernel

INT32_MAX = 2**31 - 1
CTYPE = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long", "bool": "bool"}
VALUE_STRUCTURES = ("mask", "sign")


def _string(text: str) -> str:
    """A TOML string: multi-line literal where it can be, else a basic string (JSON's escapes are TOML's)."""
    if "'''" not in text and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text):
        return "'''\n" + text + "'''"
    return json.dumps(text)


def _dims(dims: Sequence[Any]) -> str:
    return "[" + ", ".join(json.dumps(d) if isinstance(d, str) else str(d) for d in dims) + "]"


def _sizes(sizes: dict[str, int]) -> str:
    return "{ " + ", ".join(f"{k} = {v}" for k, v in sizes.items()) + " }"


def _longest(probe: ProblemProbe) -> str:
    """The tolerance's reduction length: the longest size, or dimension where none is a size."""
    if probe.sizes:
        return f"max({', '.join(probe.sizes)})"
    return str(max((d for a in probe.arrays for d in a.dims if isinstance(d, int)), default=1))


def _described(probe: ProblemProbe, problem_text: str) -> str:
    inputs = probe.forward_inputs()
    state = [a for a in probe.arrays if a.state_key]
    outputs = [a for a in probe.arrays if a.role == "output"]
    described = (f"Computes the forward pass of the PyTorch Model of a KernelBench-style problem (below), "
                 f"Model(*get_init_inputs()).forward({', '.join(a.name for a in inputs)})"
                 + (f", with the model's parameters and buffers passed in as inputs "
                    f"({', '.join(f'{a.name} = {a.state_key}' for a in state)})" if state else "")
                 + f", into {', '.join(a.name for a in outputs)}. Every array is row-major and densely packed; "
                 "the sizes follow the arrays as int arguments. The sizes are the problem's module-level "
                 "constants that shape the arrays; the performance case is the problem's own values, the "
                 "correctness cases smaller values the Model also runs at (the problem file runs with the "
                 "case's values in place of its constants). Accumulate in the inputs' precision or wider; "
                 "TF32 is not allowed.\n")
    for s in probe.scalars:
        described += (f"\n{s.name} is the Python {type(s.value).__name__} {s.value!r} that get_inputs() passes, "
                      f"the same in every case; the kernel takes it by value as {s.dtype}.\n")
    structured = [a for a in probe.arrays if a.structure]
    if structured:
        described += "\nInputs drawn with the structure get_inputs() gives them, in every case: " + \
            ", ".join(f"{a.name} {a.structure.replace('_', ' ')}" for a in structured) + ".\n"
    if probe.notes:
        described += "\nWhat this workload does not keep of the problem:\n" + "".join(f"- {n}\n" for n in probe.notes)
    if probe.doc:
        described += "\n" + probe.doc.strip() + "\n"
    return described + "\nThe problem:\n\n" + problem_text.rstrip() + "\n"


def _param_lines(p: ProblemArray | ProblemScalar) -> list[str]:
    if isinstance(p, ProblemScalar):
        return ["[[params]]", f"name = {json.dumps(p.name)}", 'role = "scalar"', f'dtype = "{p.dtype}"',
                f"value = {int(p.value) if type(p.value) is bool else p.value!r}  # get_inputs()'s own", ""]
    lines = ["[[params]]", f"name = {json.dumps(p.name)}", f'role = "{p.role}"', f'dtype = "{p.dtype}"',
             f"shape = {_dims(p.dims)}"]
    if p.role == "input" and p.structure:
        lines.append(f'structure = "{p.structure}"')
    if p.role == "input" and p.density != 0.5:
        lines.append(f"density = {p.density!r}  # get_inputs()'s share of True, 1 or +1")
    if p.role == "input" and p.distribution != "uniform":
        lines.append(f'distribution = "{p.distribution}"')
    elif p.role == "input" and p.dtype != "bool" and p.structure not in VALUE_STRUCTURES:
        lines.append(f"range = [{_bound(p.low)}, {_bound(p.high)}]")
    return lines + [""]


def _bound(v: float | str) -> str:
    """A range bound as TOML: a number, or an expression of the sizes as a string."""
    return f'"{v}"' if isinstance(v, str) else repr(v)


def _shown(v: float | str) -> str:
    return v if isinstance(v, str) else f"{v:g}"


def workload_toml(name: str, probe: ProblemProbe, problem_text: str, kernel: Optional[StartKernel], stem: str) -> str:
    sizes = list(probe.sizes)
    cases = [probe.sizes, *probe.cases]
    lines = ["# Imported from a KernelBench-style problem by `warpsmith import`: problem.py is the problem,",
             "# reference.py runs its Model in float64 on the CPU, torch_baseline.py on the GPU.",
             "[workload]", f"name = {json.dumps(name)}", f"description = {_string(_described(probe, problem_text))}",
             'reference = "reference.py"',
             f"reduction = {json.dumps(_longest(probe))}  # the longest size: a conservative default tolerance", ""]
    for p in probe.params():
        lines += _param_lines(p)
    for s in sizes:
        dtype = "int32" if all(c[s] <= INT32_MAX for c in cases) else "int64"
        lines += ["[[params]]", f"name = {json.dumps(s)}", 'role = "scalar"', f'dtype = "{dtype}"',
                  f"value = {json.dumps(s)}", ""]
    factor = lambda d: str(d) if isinstance(d, int) or d.isidentifier() else f"({d})"
    moved = " + ".join(f"{ITEMSIZE[a.dtype]} * {' * '.join(map(factor, a.dims)) or 1}" for a in probe.arrays)
    lines += ["[tolerance]", "allow_tf32 = false", "",
              "[metrics]", f"bytes = {json.dumps(moved)}  # every array read or written once: the floor", "",
              "[baseline]", 'kind = "torch"', 'torch = "torch_baseline.py"', "", "[start]"]
    if kernel is None:
        lines += ["from_scratch = true  # no starting kernel: the llm proposer writes the first", ""]
    else:
        lines += [f"kernel = {json.dumps(stem)}", "", f"[kernels.{stem}]", f'source = "{stem}.cu"',
                  f"entry = {json.dumps(kernel.entry)}", f"grid = {_dims(kernel.grid)}",
                  f"block = {_dims(kernel.block)}", f"shared = {json.dumps(kernel.shared)}", ""]
    for i, case in enumerate(cases):
        case_name = "problem" if i == 0 else "x".join(str(case[s]) for s in sizes)
        case_name = case_name if len(case_name) <= 64 else f"smaller-{i}"
        lines += ["[[cases]]", f'name = "{case_name}"', f'role = "{"performance" if i == 0 else "correctness"}"',
                  f"sizes = {_sizes(case)}", ""]
    return "\n".join(lines)


_SHARED = '''
import importlib.util
from pathlib import Path

HERE = Path(__file__).parent
INPUTS = {inputs!r}  # forward's arguments, in order
SCALARS = {scalars!r}  # forward's Python numbers: get_inputs()'s own values, in every case
STATE = {state!r}  # kernel input -> the model's parameter or buffer
SIZES = {sizes!r}  # the problem's constants that are sizes, with its own values
TIED = {tied!r}  # a constant of the problem -> the size it equals


def _helper():
    spec = importlib.util.spec_from_file_location(f"problem_model_{{abs(hash(str(HERE)))}}", HERE / "problem_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _problem(helper, arrays_and_sizes):
    """problem.py run with this case's sizes as its constants."""
    constants = {{n: int(arrays_and_sizes[n]) for n in SIZES}}
    return helper.load_problem(HERE / "problem.py", {{**constants, **{{f: constants[n] for f, n in TIED.items()}}}})
'''


def _constants(probe: ProblemProbe) -> dict[str, Any]:
    return {"inputs": tuple(p.name for p in probe.forward_inputs()),
            "scalars": {s.name: s.value for s in probe.scalars},
            "state": {a.name: a.state_key for a in probe.arrays if a.state_key}, "sizes": dict(probe.sizes),
            "tied": dict(probe.tied)}


def reference_py(name: str, probe: ProblemProbe) -> str:
    return f'''"""The oracle of {name}: the problem's Model (problem.py) in float64 on the CPU."""
''' + _SHARED.format(**_constants(probe)) + '''

def reference(**arrays_and_sizes):
    try:
        import torch
    except ImportError:
        raise RuntimeError("this workload's reference runs its PyTorch problem: pip install torch") from None
    helper = _helper()
    torch.set_default_dtype(torch.float64)  # tensors the Model makes itself: float64 too (its own process)
    model = helper.build(_problem(helper, arrays_and_sizes), dtype=torch.float64)
    helper.bind(model, {key: torch.from_numpy(arrays_and_sizes[name]) for name, key in STATE.items()})
    with torch.no_grad():
        outputs = helper.outputs_of(model(*(SCALARS[n] if n in SCALARS else torch.from_numpy(arrays_and_sizes[n])
                                            for n in INPUTS)))
    return tuple(t.numpy() for t in outputs)


def reference_memory(**sizes):
    """At most the bytes reference() holds besides the arrays warpsmith counts: the most
    the Model's parameters and forward's tensors hold at once (convolutions' unfolded
    inputs too), per-thread workspaces and PyTorch itself, traced on PyTorch's meta device
    at these sizes (nothing allocated)."""
    helper = _helper()
    return helper.reference_bytes(_problem(helper, sizes))
'''


def torch_baseline_py(name: str, probe: ProblemProbe) -> str:
    return f'''"""PyTorch on the problem's own Model (problem.py): the baseline of {name}, eager and torch.compile."""
''' + _SHARED.format(**_constants(probe)) + '''
import torch  # noqa: E402

_MODELS = {}  # (sizes, the parameters' memory) -> the Model built on the GPU, bound to that memory


@torch.compiler.disable  # building and looking up stay eager; the Model's forward is what gets compiled
def _model(arrays_and_sizes):
    key = (tuple(arrays_and_sizes[n] for n in SIZES), tuple(arrays_and_sizes[n].data_ptr() for n in STATE))
    if key not in _MODELS:
        helper = _helper()
        device = next(arrays_and_sizes[n] for n in INPUTS if n not in SCALARS).device
        model = helper.build(_problem(helper, arrays_and_sizes), device=device)
        helper.bind(model, {key: arrays_and_sizes[name] for name, key in STATE.items()})
        _MODELS[key] = model
    return _MODELS[key]


def baseline(**arrays_and_sizes):
    return _model(arrays_and_sizes)(*(SCALARS[n] if n in SCALARS else arrays_and_sizes[n] for n in INPUTS))
'''


def inputs_line(probe: ProblemProbe) -> str:
    """How each of forward's inputs reaches the kernel, in every case."""
    def one(p: ProblemArray | ProblemScalar) -> str:
        if isinstance(p, ProblemScalar):
            return f"{p.name} = {p.value!r} by value ({p.dtype})"
        share = f", {p.density:g} of them {'True' if p.dtype == 'bool' else '1' if p.structure == 'mask' else '+1'}" \
            if p.density != 0.5 else ""
        if p.dtype == "bool":
            return f"{p.name} bool (False and True{share})"
        if p.structure in VALUE_STRUCTURES:
            return f"{p.name} {p.structure} ({'0 and 1' if p.structure == 'mask' else '-1 and 1'}{share})"
        drawn = "normal N(0, 1)" if p.distribution == "normal" else \
            f"uniform [{_shown(p.low)}, {_shown(p.high)}]"
        return f"{p.name} {drawn}" + (f", {p.structure.replace('_', ' ')}" if p.structure else "")
    return "; ".join(one(p) for p in probe.forward_inputs())


def sizes_line(probe: ProblemProbe) -> str:
    return ", ".join(f"{k}={v}" for k, v in probe.sizes.items()) or "none"


def expected_arguments(probe: ProblemProbe) -> str:
    """The kernel's parameters as C, for the user writing --kernel."""
    params = [f"{CTYPE[p.dtype]} {p.name}" if isinstance(p, ProblemScalar)
              else f"{'const ' if p.role == 'input' else ''}{CTYPE[p.dtype]}* {p.name}" for p in probe.params()]
    return ", ".join(params + [f"int {s}" for s in probe.sizes])  # int64 where a size passes 2^31 - 1
