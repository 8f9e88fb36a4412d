"""The best kernel as a Python module of its own (kernel.py, written by `warpsmith
export`): `launch(*arrays, **sizes)` for CuPy arrays or CUDA torch tensors, with the
checks, the scalars and the launch rule of the workload, and `register_torch_op()`.

The module imports nothing of warpsmith. Its generated half is built from checked
data only: shapes, scalars and the launch rule become Python through Expr.python()
(from the whitelisted tree, never from text), and every string a model may have
written (the CUDA source, the entry, options, define names) goes in as a repr()
literal: data, never code. The fixed half is exported_module.py."""

from __future__ import annotations

import ast
import keyword
import re
from pathlib import Path
from typing import Callable, Optional

from ..evaluate.records import Best
from ..runtime.arch_target import asks_arch_specific
from ..runtime.compile_policy import check_options, check_source, define_options
from ..spec.candidate import Candidate
from ..spec.expr import PYTHON_HELPERS, Expr
from ..spec.launch import MemsetStep, Program, StepArg
from ..spec.workload_model import ArrayParam, ScalarParam, Workload

Namer = Callable[[str], str]  # a name in the expression -> the Python that reads it
Whole = Callable[[Expr, Namer], str]  # an expression -> Python for its (checked) integer value

MODULE_FILE = "kernel.py"
FIXED_HALF = Path(__file__).with_name("exported_module.py")


def hopper_only(cand: Candidate) -> str:
    """What of the kernel the exported module (CuPy's NVRTC and launch) cannot do, or "": the
    runner's TMA descriptors and clusters, and the arch-specific target (sm_90a)."""
    if asks_arch_specific(cand.source):
        return "it needs the arch-specific target (wgmma, setmaxnreg: sm_90a)"
    launches = cand.program.launches if cand.program else ()
    if any(a.tma is not None for s in launches for a in s.args):
        return "its program passes TMA descriptors"
    if any(s.launch.clustered for s in launches):
        return "its program launches thread block clusters"
    return ""


def launch_module(workload: Workload, best: Best) -> str:
    """The module's source. Raises ValueError when the best kernel's options or includes
    are not ones the compiler would accept (a tampered session): CuPy passes them to
    NVRTC on the user's machine. Raises ExprError for a rule Python cannot write."""
    spec = best.spec
    refusal = check_source(spec.source) or check_options(list(spec.options) + define_options(spec.defines),
                                                        workload.tolerance.allow_fast_math)
    if refusal:
        raise ValueError(f"the best kernel cannot be exported: {refusal}")
    cand = spec.to_candidate()
    hopper = hopper_only(cand)
    if hopper:
        raise ValueError(f"the best kernel cannot be exported as a module yet: {hopper}; kernel.cu and "
                         "launch.json hold it")
    arrays = workload.arrays
    scalars = [p for p in workload.params if not isinstance(p, ArrayParam)]
    sizes = list(dict.fromkeys(name for case in workload.cases for name in case.sizes))
    knobs = cand.knob_values()
    rule = cand.launch
    size: Namer = lambda n: f"s[{n!r}]"
    value: Namer = lambda n: f"v[{n!r}]"
    whole: Whole = lambda e, name: (repr(e.tree.value) if isinstance(e.tree, ast.Constant) and isinstance(e.tree.value, int)
                             else f"_whole({e.python(name)}, {e.shown()!r})")
    needed = set().union(*(e.names() for p in arrays for e in p.shape), *(p.value.names() for p in scalars),
                         *((e.names() - set(knobs)) for e in (*rule.grid, *rule.block, rule.shared)))
    binds = [(i, d, e.tree.id) for i, p in enumerate(arrays) for d, e in enumerate(p.shape)
             if isinstance(e.tree, ast.Name)]
    from_inputs = {n for i, _, n in binds if arrays[i].role == "input"}
    op_sizes = tuple(n for n in sizes if n in needed and n not in from_inputs)
    order = [("array", arrays.index(p)) if isinstance(p, ArrayParam) else ("scalar", scalars.index(p))
             for p in workload.params]
    lines = [
        _docstring(workload, arrays, op_sizes),
        "",
        f"WORKLOAD = {workload.name!r}",
        f"KERNEL = {spec.name!r}  # the attempt that became the best, score {best.score_ms:.4f} ms",
        f"ENTRY = {spec.entry!r}",
        f"OPTIONS = {tuple(cand.compile_options())!r}",
        f"KNOBS = {knobs!r}  # the knob values it was compiled and validated with",
        "# (name, role, dtype, shape) of each array, (name, dtype) of each scalar, and the kernel's",
        "# argument order over them",
        "ARRAYS = (",
        *(f"    {(p.name, p.role, p.dtype, tuple(e.shown() for e in p.shape))!r}," for p in arrays),
        ")",
        f"SCALARS = {tuple((p.name, p.dtype) for p in scalars)!r}",
        f"PARAMS = {tuple(order)!r}",
        f"SIZES = {tuple(sizes)!r}",
        f"NEEDED = {tuple(n for n in sizes if n in needed)!r}  # the sizes a launch needs",
        "# (array, dimension, size): where each size is read from",
        f"BINDS = {tuple(binds)!r}",
        f"OP_NAME = {_op_name(workload.name)!r}",
        f"OP_SIZES = {op_sizes!r}  # the op's int arguments: sizes no input's shape gives",
        f"OP_SCHEMA = {_op_schema(arrays, op_sizes)!r}  # after OP_NAME: the custom op's arguments and results",
        "SOURCE = (",
        *(f"    {line!r}" for line in spec.source.splitlines(keepends=True) or [""]),
        ")",
        PYTHON_HELPERS,
        "",
        "def _shapes(s):",
        "    return (",
        *(f"        ({''.join(whole(e, size) + ', ' for e in p.shape)}),  # {p.name}" for p in arrays),
        "    )",
        "",
        "",
        "def _scalars(s):",
        "    return (",
        *(f"        {whole(p.value, size) if p.dtype.startswith('int') else f'float({p.value.python(size)})'},"
          f"  # {p.name}" for p in scalars),
        "    )",
        "",
        "",
        "def _launch_rule(s):",
        "    v = {**s, **KNOBS}",
        "    grid = (",
        *(f"        {whole(e, value)}," for e in rule.grid),
        "    )",
        "    block = (",
        *(f"        {whole(e, value)}," for e in rule.block),
        "    )",
        f"    return grid, block, {whole(rule.shared, value)}",
        "",
        "",
        *_program_half(cand.program, arrays, scalars, whole, value),
        "",
        "",
    ]
    return "\n".join(lines) + FIXED_HALF.read_text()


_KINDS = {"i32": "int32", "i64": "int64", "f32": "float32", "f64": "float64"}


def _program_half(program: Optional[Program], arrays: list[ArrayParam], scalars: list[ScalarParam], whole: Whole,
                  value: Namer) -> list[str]:
    """PROGRAM, WORKSPACE, _workspace_sizes(s) and _program(s): a program's steps as data
    (entries as literals, arithmetic rebuilt from the checked trees); PROGRAM = False and
    no steps for a single launch."""
    if program is None:
        return ["PROGRAM = False", "WORKSPACE = ()", "", "", "def _workspace_sizes(s):", "    return ()", "", "",
                "def _program(s):", "    return ()"]
    names = [w.name for w in program.workspace]
    arrays_at = {p.name: i for i, p in enumerate(arrays)}
    scalars_at = {p.name: i for i, p in enumerate(scalars)}

    def ref(name: str) -> str:  # where a step's buffer lives: the caller's arrays or the workspace
        return repr(("array", arrays_at[name]) if name in arrays_at else ("workspace", names.index(name)))

    def arg(a: StepArg) -> str:
        if a.expr is not None:
            number = whole(a.expr, value) if a.kind[0] == "i" else f"float({a.expr.python(value)})"
            return f"('value', {_KINDS[a.kind]!r}, {number})"
        return f"('param', {scalars_at[a.name]})" if a.name in scalars_at else ref(a.name)
    steps = []
    for step in program.steps:
        if isinstance(step, MemsetStep):
            steps.append(f"        ('memset', {ref(step.target)}),")
            continue
        r = step.launch
        dims: Callable[[tuple[Expr, ...]], str] = lambda d: "(" + ", ".join(whole(e, value) for e in d) + ")"
        steps.append(f"        ('launch', {step.entry!r}, {dims(r.grid)}, {dims(r.block)}, {whole(r.shared, value)}, "
                     f"({''.join(arg(a) + ', ' for a in step.args)})),")
    return [
        "PROGRAM = True  # several launches and memsets over workspace, run in order on one stream",
        f"WORKSPACE = {tuple((w.name, w.dtype, w.init) for w in program.workspace)!r}  # (name, dtype, init)",
        "",
        "",
        "def _workspace_sizes(s):",
        "    v = {**s, **KNOBS}",
        "    return (",
        *(f"        {whole(w.size, value)},  # {w.name}, elements" for w in program.workspace),
        "    )",
        "",
        "",
        "def _program(s):",
        "    v = {**s, **KNOBS}",
        "    return (",
        *steps,
        "    )",
    ]


def _op_name(workload: str) -> str:
    name = re.sub(r"\W", "_", workload)
    return name if name[0].isalpha() else f"k_{name}"


def _op_schema(arrays: list[ArrayParam], op_sizes: tuple[str, ...]) -> str:
    """`(Tensor A, Tensor B) -> Tensor`: parameter names as the spec has them (a Python
    keyword gets a trailing _, so the op can be called by keyword)."""
    name: Namer = lambda n: n + "_" if keyword.iskeyword(n) else n
    args = [f"Tensor {name(p.name)}" for p in arrays if p.role == "input"] + [f"int {name(n)}" for n in op_sizes]
    outputs = sum(p.role == "output" for p in arrays)
    return f"({', '.join(args)}) -> {'Tensor' if outputs == 1 else '(' + ', '.join(['Tensor'] * outputs) + ')'}"


def _docstring(workload: Workload, arrays: list[ArrayParam], op_sizes: tuple[str, ...]) -> str:
    """Built from names (identifiers) and rebuilt expressions only: no free text."""
    ins = ", ".join([p.name for p in arrays if p.role == "input"] + list(op_sizes))
    outs = ", ".join(p.name for p in arrays if p.role == "output")
    params = "\n".join(f"    {p.name}: {p.dtype} [{', '.join(e.shown() for e in p.shape)}], {p.role}" for p in arrays)
    return f'''"""The {workload.name} kernel warpsmith found, as a module: needs CuPy to launch, nothing of warpsmith.

    import kernel
    kernel.launch({", ".join(p.name for p in arrays)})  # CuPy arrays or CUDA torch tensors; writes {outs}
    op = kernel.register_torch_op()  # torch.ops.warpsmith.{_op_name(workload.name)}({ins}) -> {outs}

Arrays, in the kernel's order (dense, row-major):
{params}
Sizes are read from the arrays' shapes; pass any other as a keyword. The kernel runs
on the current stream: CuPy's, or torch.cuda.current_stream() for tensors.
kernel.cu and launch.json beside this file hold the same kernel and rule.
"""'''
