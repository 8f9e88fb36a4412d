"""PyTorch as a baseline, inside the GPU worker, timed by the runner's own loop.

The workload's `torch` file defines ``baseline(**inputs, **sizes)`` returning the
output tensor (or a tuple, in the order of the workload's outputs), and one
``baseline_NAME`` of the same form for each variant the workload lists (``torch_variants``:
baseline kind ``torch_NAME``, timed eager). A function whose library cannot serve a case
here (a PyTorch without that backend, a shape it refuses) raises NotImplementedError:
the case is reported not applicable to that baseline, not failed. Inputs are
zero-copy torch views of the worker's own case buffers, so PyTorch reads exactly
the bytes the candidate reads; its work is enqueued on the runner's stream
(torch.cuda.ExternalStream), so the same L2 flush and the same CUDA events
bracket it. Eager mode pays its real per-call host cost; `compile` wraps the
function in torch.compile (compiled on the first, untimed, validation call).
For validation the result is copied into the case's output buffers, outside the
timed region, and checked exactly like a kernel's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence, Union

if TYPE_CHECKING:
    import torch

    from ..runtime.native import Device
    from ..spec.workload_model import Workload
    from .case_buffers import CaseBuffers

    # What a baseline function returns: the output tensor, or one per output in their order.
    BaselineResult = Union[torch.Tensor, tuple[torch.Tensor, ...], list[torch.Tensor]]
    Sizes = dict[str, Union[int, float]]  # the case's scalars, by name (CaseJob.scalars)

# bfloat16 and fp8 have no __cuda_array_interface__ type string: their buffers are aliased as
# integers of their width and viewed as the torch dtype of the same name (same bits), so the
# baseline computes on bfloat16 or fp8, not on integers.
TYPESTR = {"float16": "<f2", "bfloat16": "<i2", "float32": "<f4", "float64": "<f8", "int32": "<i4", "int64": "<i8",
           "float8_e4m3fn": "|u1", "float8_e5m2": "|u1", "bool": "|b1"}
ALIASED = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


class _DeviceView:
    """Just enough of __cuda_array_interface__ for torch.as_tensor to alias device memory."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: str):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": TYPESTR[dtype], "data": (ptr, False),
                                         "version": 3, "strides": None}


def is_torch_kind(kind: str) -> bool:
    return kind.startswith("torch_")


def torch_function(kind: str) -> str:
    """The torch file's function a baseline kind calls: eager and compiled call ``baseline``,
    variant ``torch_NAME`` calls ``baseline_NAME``."""
    return "baseline" if kind in ("torch_eager", "torch_compile") else "baseline_" + kind.removeprefix("torch_")


def load_baseline(path: Path, function: str = "baseline") -> Callable[..., BaselineResult]:
    spec = importlib.util.spec_from_file_location(f"warpsmith_torch_{path.parent.name}", path)
    if spec is None or spec.loader is None:  # not a name Python loads as source (no .py)
        raise ValueError(f"{path.name} must be a Python file defining {function}(**inputs, **sizes)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, function, None)):
        raise ValueError(f"{path.name} must define {function}(**inputs, **sizes)")
    baseline: Callable[..., BaselineResult] = getattr(module, function)  # the workload's file, trusted to match
    return baseline


class TorchBaseline:
    def __init__(self, device: Device, source: str, compiled: bool, function: str = "baseline"):
        import torch
        # fp32 means fp32: PyTorch is compared with TF32 off, like every kernel here.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.torch, self.device = torch, device
        self.cuda = f"cuda:{device.facts.ordinal}"  # the runner's GPU, not torch's current one
        torch.cuda.set_device(device.facts.ordinal)
        self.fn = load_baseline(Path(source), function)
        if compiled:
            self.fn = torch.compile(self.fn, dynamic=False)
        # (ExternalStream's constructor is unannotated in PyTorch)
        self.stream = torch.cuda.ExternalStream(device.stream_handle, device=self.cuda)  # type: ignore[no-untyped-call]

    def tensors(self, bufs: CaseBuffers) -> dict[str, torch.Tensor]:
        torch = self.torch
        views = {name: torch.as_tensor(_DeviceView(a.ptr, a.job.shape, a.job.dtype), device=self.cuda)
                 for name, a in bufs.arrays.items()}
        dtypes = {name: a.job.dtype for name, a in bufs.arrays.items()}
        return {name: v.view(getattr(torch, dtypes[name])) if dtypes[name] in ALIASED else v
                for name, v in views.items()}

    def call(self, inputs: dict[str, torch.Tensor], sizes: Sizes) -> BaselineResult:
        with self.torch.cuda.stream(self.stream):
            return self.fn(**inputs, **sizes)

    def run_into_outputs(self, bufs: CaseBuffers, sizes: Sizes) -> None:
        """One call; its result copied into the output buffers (for the checks)."""
        views = self.tensors(bufs)
        inputs = {a.job.name: views[a.job.name] for a in bufs.inputs()}
        result = self.call(inputs, sizes)
        results = result if isinstance(result, (tuple, list)) else (result,)
        outputs = bufs.outputs()
        if len(results) != len(outputs):
            raise ValueError(f"the torch baseline returned {len(results)} tensors for {len(outputs)} outputs")
        with self.torch.cuda.stream(self.stream):
            for a, r in zip(outputs, results):
                views[a.job.name].copy_(r.reshape(views[a.job.name].shape))
        self.device.synchronize()

    def release_cached_memory(self) -> None:
        """PyTorch keeps freed blocks mapped for reuse, and a cuBLAS workspace per handle
        and stream alive: memory in this context that no fence covers, where a later
        candidate could keep data between launches. The workspaces are handed back to the
        cache (an internal call, where this PyTorch has it), then the cache is unmapped: a
        stray pointer into any of it faults instead."""
        clear = getattr(self.torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        self.torch.cuda.empty_cache()

    def timer(self, bufs: CaseBuffers, sizes: Sizes) -> Callable[[], None]:
        """The zero-argument callable the runner times: one eager (or compiled) call."""
        views = self.tensors(bufs)
        inputs = {a.job.name: views[a.job.name] for a in bufs.inputs()}
        fn, torch, stream = self.fn, self.torch, self.stream

        def once() -> None:
            with torch.cuda.stream(stream):
                fn(**inputs, **sizes)
        return once


KIND_NAMES = {"torch_eager": "PyTorch eager", "torch_compile": "torch.compile"}


def kind_name(kind: str) -> str:
    """A PyTorch baseline kind as a user reads it: "PyTorch eager", "torch.compile", "PyTorch cudnn"."""
    return KIND_NAMES.get(kind, "PyTorch " + kind.removeprefix("torch_"))


def torch_missing_line(workloads: Sequence[Workload]) -> str | None:
    """One line for eval/run/bench when a workload declares PyTorch baselines and torch
    is not importable: what it costs and how to add them; None when nothing is lost."""
    if torch_available():
        return None
    lost = list(dict.fromkeys(k for w in workloads for k in w.baseline.kinds() if is_torch_kind(k)))
    if not lost:
        return None
    bare = [w.name for w in workloads if w.baseline.primary and is_torch_kind(w.baseline.primary)]
    cost = f"; {', '.join(bare)} then {'has' if len(bare) == 1 else 'have'} no baseline to compare with" if bare else ""
    names = [kind_name(k) for k in lost]
    listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
    return (f"warpsmith: note: PyTorch is not installed, so the {listed} "
            f"baselines are left out{cost}; `pip install torch` adds them")


def note_torch_missing(workloads: Sequence[Workload]) -> None:
    """Print torch_missing_line once, on stderr (called once the GPU is known to be there)."""
    import sys
    line = torch_missing_line(workloads)
    if line:
        print(line, file=sys.stderr)
