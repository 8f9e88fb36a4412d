"""A KernelBench-style problem's Model for one case: built for the case's sizes, using
given tensors as its parameters and buffers. `warpsmith import` copies this file into
the workload (problem_model.py), where reference.py and torch_baseline.py use it; the
import's own probe (kernelbench_probe.py) uses it too, so all three build the Model
alike. It imports nothing of warpsmith (PyTorch inside the functions that need it).

A case's sizes reach the Model through get_init_inputs(): every int in it (in nested
lists and tuples too) equal to one of the problem's own sizes becomes the case's
value of that size, e.g. nn.LayerNorm(4096) -> nn.LayerNorm(1365).
"""

import importlib.util
from pathlib import Path


def load_problem(path):
    """The problem file as a module (its top level runs: the user's code)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"kernelbench_problem_{abs(hash(str(path.resolve())))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resized(value, sizes):
    """`value` with every int that is a key of `sizes` (problem value -> case value)
    replaced, inside lists and tuples too."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return sizes.get(value, value)
    if isinstance(value, (list, tuple)):
        items = [resized(v, sizes) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def build(problem, sizes, device="cpu", dtype=None):
    """Model(*get_init_inputs()) for a case (sizes: problem value -> case value), on
    `device`, in eval mode; the global CPU RNG is left as it was."""
    import torch
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = problem.Model(*resized(list(problem.get_init_inputs()), sizes))
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
        if leaf in module._parameters:
            module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=False)
        else:
            module._buffers[leaf] = tensor


def outputs_of(result):
    """forward's result as a tuple of tensors, a 0-dimensional one as shape (1,)."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    return tuple(t.reshape(1) if hasattr(t, "dim") and t.dim() == 0 else t for t in items)
