"""A KernelBench-style problem's Model for one case: the problem file run with the
case's sizes as its module-level constants, its Model built from get_init_inputs(),
using given tensors as its parameters and buffers. `warpsmith import` copies this
file into the workload (problem_model.py), where reference.py and torch_baseline.py
use it; the import's probe (kernelbench_probe.py) uses it too, so all three build
the Model alike. It imports nothing of warpsmith (PyTorch inside the functions that
need it).

A case's sizes reach the Model through the problem's own code: the constants are
the file's top-level assignments of whole numbers (`batch_size = 16`, `N = 2048 * 2`,
`D, H, W = (16, 32, 32)`, `input_shape = (32768,)`), and the file runs with the
case's values written in their place, so everything computed from them
(`bias_shape = (out_channels, 1, 1)`, get_init_inputs(), get_inputs()) follows.
"""

import ast
import importlib.util
import sys
from pathlib import Path

_FOLD = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
         ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a ** b if 0 <= b <= 64 else None}


def _whole(node):
    """The whole number a literal expression (`8192 * 2`) makes, else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _whole(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLD:
        left, right = _whole(node.left), _whole(node.right)
        if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
            return None
        return _FOLD[type(node.op)](left, right)
    return None


def _slots(statement):
    """(constant name, the literal node holding its value) of one top-level statement."""
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
        targets, value = [statement.target], statement.value
    elif isinstance(statement, ast.Assign):
        targets, value = statement.targets, statement.value
    else:
        return []
    slots = []
    for target in targets:
        if isinstance(target, ast.Name) and _whole(value) is not None:
            slots.append((target.id, value))
        elif isinstance(target, ast.Name) and isinstance(value, ast.Tuple):
            items = [e for e in value.elts if _whole(e) is not None]
            if len(items) == len(value.elts) == 1:
                slots.append((target.id, items[0]))
            elif len(items) == len(value.elts):
                slots += [(f"{target.id}_{i}", e) for i, e in enumerate(items)]
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            slots += [(t.id, v) for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name)
                      and _whole(v) is not None]
    return slots


def _tree(source):
    """The module's tree with chained assignments (`height = width = 128`) split, so each
    name is a constant of its own."""
    tree = ast.parse(source)
    body = []
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) > 1:
            body += [ast.copy_location(ast.Assign(targets=[t], value=ast.parse(ast.unparse(statement.value),
                                                                               mode="eval").body), statement)
                     for t in statement.targets]
        else:
            body.append(statement)
    tree.body = body
    return ast.fix_missing_locations(tree)


def problem_constants(source):
    """The problem's constants in file order: name -> value (the first assignment of a
    name; a name assigned twice is no constant)."""
    seen, twice = {}, set()
    for statement in _tree(source).body:
        for name, node in _slots(statement):
            if name in seen:
                twice.add(name)
            seen.setdefault(name, _whole(node))
    return {k: v for k, v in seen.items() if k not in twice and not k.startswith("_")}


class _Replace(ast.NodeTransformer):
    """Each literal node named in `values` (by identity) becomes that whole number."""

    def __init__(self, values):
        self.values = values

    def visit(self, node):
        if id(node) in self.values:
            return ast.copy_location(ast.Constant(self.values[id(node)]), node)
        return super().visit(node)


def load_problem(path, constants=None):
    """The problem file as a module (its top level runs: the user's code), with
    `constants` (name -> whole number) written in place of its own values."""
    path = Path(path)
    tree = _tree(path.read_text(encoding="utf-8-sig"))
    values = {id(node): constants[name] for statement in tree.body for name, node in _slots(statement)
              if constants and name in constants}
    tree = ast.fix_missing_locations(_Replace(values).visit(tree))
    # A name of its own per file and constants, in sys.modules as an import leaves it:
    # torch.compile imports the module of the forward it traces by name.
    key = abs(hash((str(path.resolve()), tuple(sorted((constants or {}).items())))))
    spec = importlib.util.spec_from_file_location(f"kernelbench_problem_{key}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module.__name__] = module
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


def build(problem, device="cpu", dtype=None):
    """Model(*get_init_inputs()) of a loaded problem, on `device`, in eval mode; the
    global CPU RNG is left as it was."""
    import torch
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = problem.Model(*problem.get_init_inputs())
    model = model.to(device=device) if dtype is None else model.to(device=device, dtype=dtype)
    return model.eval()


def state_tensors(model):
    """The parameters and floating-point buffers (of one dimension or more) a kernel gets
    as inputs, by state-dict key, in the model's order."""
    state = dict(model.named_parameters())
    state.update((k, b) for k, b in model.named_buffers() if b.is_floating_point() and b.dim() >= 1)
    return state


def bind(model, tensors):
    """Make the model compute with `tensors` (state-dict key -> tensor) as its parameters
    and buffers: the same memory, no copy."""
    import torch
    for key, tensor in tensors.items():
        owner, _, leaf = key.rpartition(".")
        module = model.get_submodule(owner)
        own = module._parameters.get(leaf, module._buffers.get(leaf))
        if own is not None and own.dim() == 0:  # a kernel input of one element stands for a 0-d tensor
            tensor = tensor.reshape(())
        if leaf in module._parameters:
            module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=False)
        else:
            module._buffers[leaf] = tensor


def outputs_of(result):
    """forward's result as a tuple of tensors, a 0-dimensional one as shape (1,)."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    return tuple(t.reshape(1) if hasattr(t, "dim") and t.dim() == 0 else t for t in items)


def _unfolded(func, operands, out):
    """Bytes of the unfolded input (im2col) PyTorch's CPU convolution makes beside its
    result, counted for the whole batch: C_in * prod(kernel) x prod(output) per sample,
    or, transposed, C_out * prod(kernel) x prod(input)."""
    if getattr(func, "__name__", "") != "convolution.default" or len(operands) < 7:
        return 0
    x, weight, transposed = operands[0], operands[1], bool(operands[6])
    groups = operands[8] if len(operands) > 8 else 1
    kernel = 1
    for k in weight.shape[2:]:
        kernel *= k
    spatial = 1
    for n in (x.shape[2:] if transposed else out.shape[2:]):
        spatial *= n
    return weight.shape[1] * groups * kernel * spatial * x.shape[0] * x.element_size()


WORKSPACE_PER_THREAD = 16 << 20  # bytes: a BLAS's packed panels and other per-thread buffers (12 MiB seen)


def _resident():
    """This process's resident bytes now (PyTorch and NumPy loaded), 0 where unknown."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0


def reference_bytes(problem):
    """An upper bound of the bytes a float64 run of the problem's Model on the CPU holds
    besides its inputs and outputs (the arrays warpsmith counts): the most that is live at
    once of the Model's own parameters and every tensor forward makes (each from the op
    that makes it until the last tensor on its memory is gone), plus the unfolded input of
    a convolution while it runs; WORKSPACE_PER_THREAD for each of PyTorch's threads; and
    what this process holds with PyTorch loaded. Traced on the meta device at the loaded
    problem's sizes: nothing is allocated. Raises whatever the problem raises there (an
    operator with no meta kernel)."""
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    live, peak, refs, sizes = [0], [0], {}, {}

    def release(key):
        refs[key] -= 1
        if refs[key] == 0:
            live[0] -= sizes.pop(key, 0)

    class Held(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, operands=(), kwargs=None):
            out = func(*operands, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for ret, value in zip(func._schema.returns, outs):
                if not isinstance(value, torch.Tensor):
                    continue
                key = value.untyped_storage()._cdata
                if ret.alias_info is None and key not in sizes:
                    sizes[key] = value.untyped_storage().nbytes()
                    live[0] += sizes[key]
                refs[key] = refs.get(key, 0) + 1
                weakref.finalize(value, release, key)
            peak[0] = max(peak[0], live[0] + _unfolded(func, operands, outs[0]))
            return out

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # as reference.py runs it
    try:
        with torch.device("meta"), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            inputs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                      for x in problem.get_inputs()]
            with Held(), torch.no_grad():
                model = problem.Model(*problem.get_init_inputs()).to(torch.float64).eval()
                result = model(*inputs)
            del model, result
    finally:
        torch.set_default_dtype(previous)
    return peak[0] + WORKSPACE_PER_THREAD * torch.get_num_threads() + _resident()
