"""`warpsmith import`: a KernelBench-style PyTorch problem (a file defining class
Model(nn.Module), get_inputs() and get_init_inputs()) becomes a workload directory.

The problem runs only in the probe child (kernelbench_probe.py: its own process, a
time limit, no secrets), which reports the arrays and sizes as data; this module
writes, from that data alone:

    workload.toml      forward's inputs, then the model's parameters and buffers (as
                       inputs), then its outputs, then every size as an int scalar;
                       the problem's sizes as the performance case, the smaller sizes
                       the Model ran at as correctness cases; baseline: PyTorch
    problem.py         the problem, copied
    problem_model.py   builds its Model for a case (kernelbench_model.py, copied)
    reference.py       the Model in float64 on the CPU
    torch_baseline.py  the Model in PyTorch eager (and torch.compile) on the GPU
    KERNEL.cu          the starting kernel given with --kernel; without one the
                       workload starts from scratch: the llm proposer writes it

The directory is written beside DIR and renamed into place once the spec loads, so
a failure leaves nothing behind.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from .expr import Expr, ExprError
from .reference_run import ChildDied, run_child
from .workload import SpecError, Workload, load_workload, name_problem

MODEL_HELPER = Path(__file__).with_name("kernelbench_model.py")
ITEMSIZE = {"float32": 4, "float64": 8, "int32": 4, "int64": 8}
INT32_MAX = 2**31 - 1


class ImportRefused(ValueError):
    """The problem (or the arguments) cannot make a workload; one line says why."""


@dataclass(frozen=True)
class ProblemArray:
    name: str  # the kernel parameter's name
    role: str  # input | output
    dtype: str
    dims: tuple[str | int, ...]  # expressions of the sizes, or literal extents
    low: float = -1.0  # inputs: drawn uniformly from [low, high]
    high: float = 1.0
    state_key: str = ""  # the model's parameter or buffer this input stands for


@dataclass(frozen=True)
class ProblemProbe:
    """What the probe found: arrays in the kernel's order and sizes (the problem's constants
    that shape them, with its values, in order of first use), the smaller sizes the Model ran
    at, what the workload does not keep of the problem (notes, one line each), its docstring."""

    arrays: tuple[ProblemArray, ...]
    sizes: dict[str, int]
    cases: tuple[dict[str, int], ...] = ()
    doc: str = ""
    notes: tuple[str, ...] = ()
    tied: dict[str, str] = field(default_factory=dict)  # a constant of the problem -> the size it equals

    @staticmethod
    def from_json(data: dict[str, Any]) -> "ProblemProbe":
        """The child's answer, checked as data before any of it names a file or becomes code
        (the problem's own code ran in that process). Raises ImportRefused."""
        try:
            probe = ProblemProbe(tuple(ProblemArray(**{**a, "dims": tuple(a["dims"])}) for a in data["arrays"]),
                                 dict(data["sizes"]), tuple(dict(c) for c in data["cases"]), str(data.get("doc", "")),
                                 tuple(str(n) for n in data.get("notes", ())), dict(data.get("tied", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise ImportRefused(f"the problem's probe answered something malformed ({e})") from None
        problem = probe.problem()
        if problem:
            raise ImportRefused(f"the problem's probe answered something malformed ({problem})")
        return probe

    def problem(self) -> Optional[str]:
        names = [a.name for a in self.arrays] + list(self.sizes)
        if any(not (isinstance(n, str) and n.isidentifier() and n.isascii()) or name_problem(n) for n in names) \
                or len(set(names)) != len(names):
            return f"names {names}"
        for a in self.arrays:
            if a.role not in ("input", "output") or a.dtype not in ITEMSIZE or not isinstance(a.state_key, str):
                return f"array {a.name}"
            if not all(_names_sizes(d, self.sizes) if isinstance(d, str) else type(d) is int and d >= 1
                       for d in a.dims):
                return f"dimensions of {a.name}: {a.dims}"
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (a.low, a.high)):
                return f"range of {a.name}"
        if not all(isinstance(f, str) and f.isidentifier() and lead in self.sizes for f, lead in self.tied.items()):
            return f"ties {self.tied}"
        for case in (self.sizes, *self.cases):
            if set(case) != set(self.sizes) or not all(type(v) is int and v >= 1 for v in case.values()):
                return f"sizes {case}"
        return None


def _names_sizes(dim: str, sizes: dict[str, int]) -> bool:
    """A dimension's expression parses and names only sizes."""
    try:
        return Expr.parse(dim).names() <= set(sizes)
    except ExprError:
        return False


@dataclass(frozen=True)
class StartKernel:
    """--kernel FILE with its entry and launch rule (expressions of the sizes)."""

    path: Path
    entry: str
    grid: tuple[str, ...]
    block: tuple[str, ...]
    shared: str = "0"


@dataclass(frozen=True)
class Imported:
    workload: Workload
    probe: ProblemProbe


def probe_problem(problem: Path, timeout_s: float) -> ProblemProbe:
    """Run the probe child on `problem`; raises ImportRefused (one line)."""
    job = {"parent": os.getpid(), "problem": str(problem.resolve())}
    try:
        answer = run_child("agent.spec.kernelbench_probe", job, problem.resolve().parent, timeout_s)
    except subprocess.TimeoutExpired:
        raise ImportRefused(f"{problem.name} did not answer within {timeout_s:g} s (loading it, get_inputs(), "
                            "the Model on its inputs); raise --reference-timeout or make it faster") from None
    except ChildDied as e:
        raise ImportRefused(f"{problem.name}: its process ended ({e}) without an answer") from None
    if "error" in answer:
        raise ImportRefused(answer["error"])
    return ProblemProbe.from_json(answer["probe"])


def import_problem(problem: Path, directory: Path, timeout_s: float, kernel: Optional[StartKernel] = None,
                   name: str = "") -> Imported:
    """Probe `problem` and write the workload to `directory` (which must not hold anything).
    Raises ImportRefused or SpecError, one line, leaving nothing behind."""
    if not problem.is_file():
        raise ImportRefused(f"{problem}: no such file")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ImportRefused(f"{directory} exists and is not empty; choose a new directory")
    name = name or directory.name
    if name_problem(name):
        raise ImportRefused(f"workload name {name_problem(name)} (it comes from DIR; or give --name)")
    probe = probe_problem(problem, timeout_s)
    created = [p for p in reversed(directory.absolute().parents) if not p.exists()]
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.importing-", dir=directory.parent))
    try:
        write_workload(staging, name, probe, problem.read_text(), kernel)
        try:
            load_workload(staging)  # the same checks as a hand-written workload
        except SpecError as e:  # named as the file will be, not as the staging one
            raise SpecError(directory / "workload.toml", e.key, e.problem) from None
        if directory.exists():
            directory.rmdir()  # empty, checked above
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not directory.exists():  # it failed: the folders made for it go too
            for parent in reversed(created):
                try:
                    parent.rmdir()
                except OSError:
                    pass
    return Imported(load_workload(directory), probe)


def write_workload(directory: Path, name: str, probe: ProblemProbe, problem_text: str,
                   kernel: Optional[StartKernel]) -> None:
    """Every file of the workload, from the probe's data (nothing of the problem runs here)."""
    (directory / "problem.py").write_text(problem_text)
    shutil.copyfile(MODEL_HELPER, directory / "problem_model.py")
    (directory / "reference.py").write_text(reference_py(name, probe))
    (directory / "torch_baseline.py").write_text(torch_baseline_py(name, probe))
    stem = ""
    if kernel is not None:
        stem = re.sub(r"[^A-Za-z0-9_-]", "_", kernel.path.stem).lstrip("-")[:64] or "kernel"
        shutil.copyfile(kernel.path, directory / f"{stem}.cu")
    (directory / "workload.toml").write_text(workload_toml(name, probe, problem_text, kernel, stem))


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


def workload_toml(name: str, probe: ProblemProbe, problem_text: str, kernel: Optional[StartKernel], stem: str) -> str:
    inputs = [a for a in probe.arrays if a.role == "input" and not a.state_key]
    state = [a for a in probe.arrays if a.state_key]
    outputs = [a for a in probe.arrays if a.role == "output"]
    sizes = list(probe.sizes)
    cases = [probe.sizes, *probe.cases]
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
    if probe.notes:
        described += "\nWhat this workload does not keep of the problem:\n" + "".join(f"- {n}\n" for n in probe.notes)
    if probe.doc:
        described += "\n" + probe.doc.strip() + "\n"
    described += "\nThe problem:\n\n" + problem_text.rstrip() + "\n"
    lines = ["# Imported from a KernelBench-style problem by `warpsmith import`: problem.py is the problem,",
             "# reference.py runs its Model in float64 on the CPU, torch_baseline.py on the GPU.",
             "[workload]", f"name = {json.dumps(name)}", f"description = {_string(described)}",
             'reference = "reference.py"',
             f"reduction = {json.dumps(_longest(probe))}  # the longest size: a conservative default tolerance", ""]
    for a in probe.arrays:
        lines += ["[[params]]", f"name = {json.dumps(a.name)}", f'role = "{a.role}"', f'dtype = "{a.dtype}"',
                  f"shape = {_dims(a.dims)}"]
        if a.role == "input":
            lines.append(f"range = [{a.low!r}, {a.high!r}]")
        lines.append("")
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
    return {"inputs": tuple(a.name for a in probe.arrays if a.role == "input" and not a.state_key),
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
        outputs = helper.outputs_of(model(*(torch.from_numpy(arrays_and_sizes[n]) for n in INPUTS)))
    return tuple(t.numpy() for t in outputs)
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
        device = arrays_and_sizes[INPUTS[0]].device
        model = helper.build(_problem(helper, arrays_and_sizes), device=device)
        helper.bind(model, {key: arrays_and_sizes[name] for name, key in STATE.items()})
        _MODELS[key] = model
    return _MODELS[key]


def baseline(**arrays_and_sizes):
    return _model(arrays_and_sizes)(*(arrays_and_sizes[n] for n in INPUTS))
'''


def sizes_line(probe: ProblemProbe) -> str:
    return ", ".join(f"{k}={v}" for k, v in probe.sizes.items()) or "none"


def expected_arguments(probe: ProblemProbe) -> str:
    """The kernel's parameters as C, for the user writing --kernel."""
    ctype = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}
    arrays = [f"{'const ' if a.role == 'input' else ''}{ctype[a.dtype]}* {a.name}" for a in probe.arrays]
    return ", ".join(arrays + [f"int {s}" for s in probe.sizes])  # int64 where a size passes 2^31 - 1

