"""Runs of a KernelBench-style problem at chosen values of its constants, for the probe
(kernelbench_probe.py): the shapes and dtypes of get_inputs(), of the Model's
parameters and buffers and of forward's outputs, on the meta device (no memory, no
arithmetic), so a problem of tens of gigabytes is traced in milliseconds; and one
real run on the CPU at small sizes for the values (ranges, structure) and to see the
float64 reference work there.

A forward with an operator that has no meta kernel runs on the CPU instead, where
its inputs and parameters are small enough (CPU_ELEMENTS); elsewhere its outputs are
unknown (None) and come from the fitted expressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from .kernelbench_model import build, load_problem, outputs_of, state_tensors

# (array kind, its index or state key, axis or "rank"); kind: input | state | output
DimKey = tuple[str, Union[int, str], Union[int, str]]
CPU_ELEMENTS = 1 << 24  # inputs and parameters together, for a forward the meta device cannot do


class RunFailed(Exception):
    """The problem raised in one phase of a run; `phase` says which."""

    def __init__(self, phase: str, error: BaseException, inputs: Optional[tuple[Any, ...]] = None):
        super().__init__(f"{phase} raised {type(error).__name__}: {' '.join(str(error).split())[:300]}")
        self.phase, self.error = phase, error
        self.inputs = inputs  # the inputs' (shape, dtype), where get_inputs() ran before the failure


class NotTensors(TypeError):
    """get_inputs() returned something other than a non-empty list of tensors, or forward
    something other than tensors: `value`."""

    def __init__(self, value):
        super().__init__("it must return a non-empty list of tensors")
        self.value = value


@dataclass(frozen=True)
class Shapes:
    """What one run saw: (shape, dtype) of each input, parameter or buffer (by key) and
    output (None where the forward could not be traced), per input the [low, high] of the
    torch.randint that made it (None for other inputs), and per input the distribution
    get_inputs() drew it from, where it is the draw itself: ("uniform", low, high) for
    torch.rand and uniform_, ("normal", 0, 1) for torch.randn (None for inputs computed
    from draws). A Python number among the inputs is ((), "python_float") (or _int,
    _bool), its value in `scalars` by position."""

    inputs: tuple[tuple[tuple[int, ...], str], ...]
    state: dict[str, tuple[tuple[int, ...], str]]
    outputs: Optional[tuple[tuple[tuple[int, ...], str], ...]]
    bounds: tuple[Optional[tuple[int, int]], ...]
    draws: tuple[Optional[tuple[str, float, float]], ...] = ()
    scalars: dict[int, Union[bool, int, float]] = field(default_factory=dict)

    def dims(self) -> dict[DimKey, int]:
        """(array, axis) -> extent, for every array whose shape is known."""
        out = {}
        arrays = [(i, x) for i, x in enumerate(self.inputs) if i not in self.scalars]
        for kind, items in (("input", arrays), ("state", self.state.items()),
                            ("output", enumerate(self.outputs or ()))):
            for key, (shape, _) in items:
                out[(kind, key, "rank")] = len(shape)
                out.update(((kind, key, axis), n) for axis, n in enumerate(shape))
        return out


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "")


def is_number(x) -> bool:
    """A Python number get_inputs() may return beside tensors: a scalar the kernel takes by value."""
    return type(x) in (bool, int, float)


def _described(x) -> tuple[tuple[int, ...], str]:
    return ((), f"python_{type(x).__name__}") if is_number(x) else (tuple(x.shape), _dtype(x))


def _randint_bounds(positional, kwargs) -> Optional[tuple[int, int]]:
    """torch.randint(high, size) or (low, high, size): the values it draws, [low, high - 1]."""
    ints = [a for a in positional if type(a) is int]
    low = kwargs.get("low", ints[0] if len(ints) >= 2 else 0)
    high = kwargs.get("high", ints[1] if len(ints) >= 2 else ints[0] if ints else None)
    return None if high is None else (int(low), int(high) - 1)


def _in_place(name: str) -> bool:
    """Whether a torch function of this name changes its first argument (add_, __setitem__)."""
    if name.startswith("__") and name.endswith("__"):
        return name == "__setitem__" or name.startswith("__i")
    return name.endswith("_")


def _draw_of(torch, func, positional, kwargs) -> Optional[tuple[str, float, float]]:
    """The distribution a call draws its whole result from, or None."""
    if func in (torch.rand, torch.rand_like):
        return ("uniform", 0.0, 1.0)
    if func in (torch.randn, torch.randn_like):
        return ("normal", 0.0, 1.0)
    name, args = getattr(func, "__name__", ""), positional[1:]
    at = lambda key, i, default: float(kwargs.get(key, args[i] if len(args) > i else default))
    if name == "uniform_":  # uniform_(from=0, to=1)
        low, high = at("from", 0, 0.0), at("to", 1, 1.0)
        return ("uniform", low, high) if low < high else None
    if name == "normal_":  # normal_(mean=0, std=1): the standard one only
        return ("normal", 0.0, 1.0) if (at("mean", 0, 0.0), at("std", 1, 1.0)) == (0.0, 1.0) else None
    return None


def _calls_and_tensors(get_inputs):
    """get_inputs() under a mode that notes, by the tensor it made, each torch.randint's
    bounds and each draw's distribution; a tensor changed in place afterwards loses its draw."""
    import torch
    from torch.overrides import TorchFunctionMode
    made: dict[int, tuple[Any, Any]] = {}  # id -> (tensor, kept alive so its id stays its own; what made it)

    class Draws(TorchFunctionMode):
        def __torch_function__(self, func, types, positional=(), kwargs=None):
            kwargs = kwargs or {}
            first = positional[0] if positional else None
            if id(first) in made and made[id(first)][0] is first and _in_place(getattr(func, "__name__", "")):
                made[id(first)] = (first, None)  # no longer what was drawn
            out = func(*positional, **kwargs)
            if func is torch.randint:
                made[id(out)] = (out, ("randint", _randint_bounds(positional, kwargs)))
            elif _draw_of(torch, func, positional, kwargs) is not None:
                made[id(out)] = (out, _draw_of(torch, func, positional, kwargs))
            return out

    with Draws():
        inputs = get_inputs()
    kinds = {k: v[1] for k, v in made.items() if v[1] is not None}
    bounds = {k: v[1] for k, v in kinds.items() if v[0] == "randint"}
    draws = {k: v for k, v in kinds.items() if v[0] != "randint"}
    return inputs, bounds, draws


def shapes_at(path: Path, constants: dict[str, int], cpu_elements: int = CPU_ELEMENTS) -> Shapes:
    """The shapes of one run at `constants` (name -> value, the others the file's own).
    Raises RunFailed naming the phase."""
    import torch
    try:
        module = load_problem(path, constants)
    except Exception as e:
        raise RunFailed("loading it", e) from None
    with torch.device("meta"):
        try:
            torch.manual_seed(0)
            inputs, bounds, draws = _calls_and_tensors(module.get_inputs)
            inputs = list(inputs)
        except Exception as e:
            raise RunFailed("get_inputs()", e) from None
        if not inputs or not all(isinstance(x, torch.Tensor) or is_number(x) for x in inputs) \
                or not any(isinstance(x, torch.Tensor) for x in inputs):
            raise RunFailed("get_inputs()", NotTensors(inputs))
        described = tuple(_described(x) for x in inputs)
        try:
            model = module.Model(*module.get_init_inputs()).eval()
        except Exception as e:
            raise RunFailed("Model(*get_init_inputs())", e, described) from None
    state = {k: (tuple(t.shape), _dtype(t)) for k, t in state_tensors(model).items()}
    randint = tuple(None if is_number(x) else bounds.get(id(x)) for x in inputs)
    drawn = tuple(None if is_number(x) else draws.get(id(x)) for x in inputs)
    numbers = {i: x for i, x in enumerate(inputs) if is_number(x)}
    try:
        with torch.no_grad():
            outs = outputs_of(model(*inputs))
    except Exception:  # an operator without a meta kernel, or one whose shape depends on values
        elements = sum(x.numel() for x in inputs if not is_number(x)) + \
            sum(t.numel() for t in state_tensors(model).values())
        if elements > cpu_elements:
            return Shapes(described, state, None, randint, drawn, numbers)
        try:
            outs = real_run(path, constants).outputs
        except RunFailed as e:
            raise RunFailed(e.phase, e.error, described) from None
    if not all(isinstance(t, torch.Tensor) for t in outs):
        raise RunFailed("Model.forward", NotTensors(next(t for t in outs if not isinstance(t, torch.Tensor))))
    return Shapes(described, state, tuple((tuple(t.shape), _dtype(t)) for t in outs), randint, drawn, numbers)


@dataclass(frozen=True)
class RealRun:
    inputs: list  # get_inputs()'s tensors
    state: dict  # the model's parameters and buffers (built in float32)
    outputs: tuple  # forward in float64, as the reference computes it


def real_run(path: Path, constants: dict[str, int]) -> RealRun:
    """get_inputs() and the Model on the CPU at `constants` (small sizes: the caller's
    choice), forward in float64 as reference.py runs it. Raises RunFailed."""
    import torch
    module = load_problem(path, constants)
    torch.manual_seed(0)
    try:
        inputs = list(module.get_inputs())
    except Exception as e:
        raise RunFailed("get_inputs()", e) from None
    try:
        model = build(module)
    except Exception as e:
        raise RunFailed("Model(*get_init_inputs())", e) from None
    state = {k: t.detach().clone() for k, t in state_tensors(model).items()}
    wide = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        with torch.no_grad():
            outputs = outputs_of(model.to(torch.float64)(*(wide(x) for x in inputs)))
    except Exception as e:
        raise RunFailed("Model.forward in float64 on the CPU", e) from None
    finally:
        torch.set_default_dtype(previous)
    return RealRun(inputs, state, outputs)


def model_state(path: Path, constants: dict[str, int]) -> dict[str, Any]:
    """The Model's parameters and buffers at `constants`, built on the CPU (get_inputs()
    does not run). Raises RunFailed."""
    try:
        return {k: t.detach() for k, t in state_tensors(build(load_problem(path, constants))).items()}
    except Exception as e:
        raise RunFailed("Model(*get_init_inputs())", e) from None


def inputs_at(path: Path, constants: dict[str, int]) -> list[Any]:
    """get_inputs()'s tensors at `constants` on the CPU (small sizes: the caller's choice)."""
    import torch
    torch.manual_seed(0)
    return list(load_problem(path, constants).get_inputs())
