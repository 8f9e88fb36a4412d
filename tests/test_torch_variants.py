"""PyTorch baselines beyond eager and torch.compile: a workload's `torch_variants` each name a
function of its torch file, a baseline of its own (attention: SDPA pinned to cuDNN beside its
flash backend). Checked here without PyTorch: the spec, the function each kind calls, and the
clean skip where the library cannot serve a case; tests/test_gpu_fa3.py times them on a GPU."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import types
from contextlib import nullcontext

import pytest
from workload_factory import ROOT

from warpsmith.agent.spec.workload import SpecError, load_workload
from warpsmith.agent.worker import torch_baseline
from warpsmith.agent.worker.case_verdicts import library_check
from warpsmith.agent.worker.protocol import CaseCheck
from warpsmith.agent.worker.status import Status

ATTENTION = ROOT / "examples" / "attention_bf16"


def test_attention_lists_the_cudnn_backend_as_a_baseline_of_its_own():
    """attention_bf16: the flash backend eager (the loop's), under torch.compile, and SDPA on cuDNN."""
    b = load_workload(ATTENTION).baseline
    assert b.kinds() == ["torch_eager", "torch_compile", "torch_cudnn"] and b.primary == "torch_eager"
    assert [torch_baseline.torch_function(k) for k in b.kinds()] == ["baseline", "baseline", "baseline_cudnn"]
    assert torch_baseline.kind_name("torch_cudnn") == "PyTorch cudnn"


@pytest.mark.parametrize("edit,problem", [
    (('torch_variants = ["cudnn"]', 'torch_variants = ["flash"]'), "must define baseline_flash(q, k, v, *, BH, S, D, causal)"),
    (('torch_variants = ["cudnn"]', 'torch_variants = ["Cudnn"]'), "a variant is a lower-case name"),
    (('torch_variants = ["cudnn"]', 'torch_variants = ["compile"]'), "neither eager nor compile"),
    (("def baseline_cudnn(q, k, v, *, BH, S, D, causal):", "def baseline_cudnn(q, k, v, *, BH, S, D):"),
     "baseline_cudnn() is called with every input and scalar parameter by name and does not accept causal"),
])
def test_a_variant_the_worker_cannot_call_is_refused_when_the_workload_loads(tmp_path, edit, problem):
    """Each variant's function is checked like `baseline` itself (ast, never imported)."""
    shutil.copytree(ATTENTION, tmp_path / "w")
    for name in ("workload.toml", "torch_baseline.py"):
        path = tmp_path / "w" / name
        path.write_text(path.read_text().replace(*edit))
    with pytest.raises(SpecError, match="baseline.torch") as e:
        load_workload(tmp_path / "w")
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_a_library_that_cannot_serve_a_case_makes_it_not_applicable_and_untimed():
    """NotImplementedError from the call: the case is not applicable (never judged); anything else is a bug."""
    def refuse():
        raise NotImplementedError("PyTorch 2.3 has no SDPBackend.CUDNN_ATTENTION")
    judged = []
    check = library_check(refuse, lambda: judged.append(1) or CaseCheck(Status.OK))
    assert check.status == Status.NOT_APPLICABLE and "no SDPBackend.CUDNN_ATTENTION" in check.detail and not judged
    assert library_check(lambda: None, lambda: CaseCheck(Status.WRONG_ANSWER)).status == Status.WRONG_ANSWER
    with pytest.raises(ZeroDivisionError):
        library_check(lambda: 1 / 0, lambda: CaseCheck(Status.OK))


class TensorDouble:
    """Stands in for a torch tensor: view() is all the baseline asks of one."""

    def view(self, *shape):
        return self


def _torch_double(monkeypatch, backends: dict, sdpa):
    """A stand-in `torch` with torch.nn.attention.SDPBackend holding `backends` and SDPA as `sdpa`."""
    torch = types.ModuleType("torch")
    torch.__version__ = "double"
    nn = types.ModuleType("torch.nn")
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(**backends)
    attention.sdpa_kernel = lambda backend: nullcontext()
    nn.attention = attention
    nn.functional = types.SimpleNamespace(scaled_dot_product_attention=sdpa)
    torch.nn = nn
    for name, module in (("torch", torch), ("torch.nn", nn), ("torch.nn.attention", attention)):
        monkeypatch.setitem(sys.modules, name, module)


def _cudnn_baseline():
    spec = importlib.util.spec_from_file_location("attention_torch_baseline", ATTENTION / "torch_baseline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.baseline_cudnn


def test_attention_cudnn_baseline_says_not_applicable_where_pytorch_lacks_it(monkeypatch):
    """No SDPBackend.CUDNN_ATTENTION, or SDPA's dispatch finding no cuDNN kernel for the shape: NotImplementedError;
    another RuntimeError is not the library declining and goes through."""
    q = TensorDouble()
    _torch_double(monkeypatch, {"FLASH_ATTENTION": 1}, None)
    with pytest.raises(NotImplementedError, match="has no SDPBackend.CUDNN_ATTENTION"):
        _cudnn_baseline()(q, q, q, BH=1, S=1, D=64, causal=0)

    def no_kernel(*args, **kwargs):
        raise RuntimeError("No available kernel. Aborting execution.\nmore")
    _torch_double(monkeypatch, {"FLASH_ATTENTION": 1, "CUDNN_ATTENTION": 2}, no_kernel)
    with pytest.raises(NotImplementedError, match="cuDNN attention cannot serve 1x1-d64: No available kernel"):
        _cudnn_baseline()(q, q, q, BH=1, S=1, D=64, causal=0)

    def faulted(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    _torch_double(monkeypatch, {"CUDNN_ATTENTION": 2}, faulted)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        _cudnn_baseline()(q, q, q, BH=1, S=1, D=64, causal=0)
    _torch_double(monkeypatch, {"CUDNN_ATTENTION": 2}, lambda q, k, v, is_causal: q)
    assert _cudnn_baseline()(q, q, q, BH=1, S=1, D=64, causal=1) is q


def test_without_pytorch_the_note_names_the_variant_too(monkeypatch):
    """The missing-PyTorch line lists every PyTorch baseline the workload loses, the cuDNN one included."""
    monkeypatch.setattr(torch_baseline, "torch_available", lambda: False)
    line = torch_baseline.torch_missing_line([load_workload(ATTENTION)])
    assert "the PyTorch eager, torch.compile and PyTorch cudnn baselines are left out" in line
    assert "attention_bf16 then has no baseline to compare with" in line
