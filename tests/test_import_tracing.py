"""`warpsmith import` on KernelBench-shaped problems (needs PyTorch, skipped cleanly without it):
sizes traced from the problem's constants, dimensions as expressions of them, inputs that keep
their meaning (index bounds, what is lost named), and refusals that come before any allocation."""

from __future__ import annotations

import time

import pytest

from warpsmith.agent.cli.commands import main
from warpsmith.agent.spec.inputs import array_jobs, generate_input
from warpsmith.agent.spec.workload import load_workload

torch = pytest.importorskip("torch")

CONV = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=2, padding=1)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias

batch_size = 64
in_channels = 32
out_channels = 64
height = width = 128
kernel_size = 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''

CROSS_ENTROPY = '''
import torch

class Model(torch.nn.Module):
    def forward(self, predictions, targets):
        return torch.nn.functional.cross_entropy(predictions, targets)

batch_size = 4096
num_classes = 1000

def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]

def get_init_inputs():
    return []
'''

ONE_SIZE = '''
import torch

class Model(torch.nn.Module):
    def forward(self, A):
        return torch.cumsum(A @ A, dim=1)

N = 2048

def get_inputs():
    A = torch.rand(N, N)
    return [(A + A.T) / 2]

def get_init_inputs():
    return []
'''


def _import(tmp_path, source: str, capsys) -> tuple[int, str, str]:
    problem = tmp_path / "problem_file.py"
    problem.write_text(source)
    code = main(["import", str(problem), str(tmp_path / "out")])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_convolution_outputs_are_expressions_and_its_kernel_size_stays(tmp_path, capsys):
    """Stride 2, padding 1: the output is (height + 1) // 2 in every case; the weight keeps its 3 x 3,
    bias_shape follows out_channels; every size shrinks in the correctness cases, which check computes."""
    code, out, err = _import(tmp_path, CONV, capsys)
    assert code == 0, err
    w = load_workload(tmp_path / "out")
    shapes = {p.name: [str(e) for e in p.shape] for p in w.arrays}
    assert shapes["out"] == ["batch_size", "out_channels", "(height + 1) // 2", "(width + 1) // 2"]
    assert shapes["conv_weight"] == ["out_channels", "in_channels", "3", "3"]
    assert shapes["bias"] == ["out_channels", "1", "1"]
    assert [p.name for p in w.params if p.role == "scalar"] == ["batch_size", "in_channels", "height", "width",
                                                                 "out_channels"]
    problem = w.cases[0].sizes
    assert all(c.sizes[n] < problem[n] for c in w.cases[1:] for n in problem)
    assert main(["check", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("ok    reference") >= 2 and "FAIL" not in printed


def test_index_inputs_stay_in_range(tmp_path, capsys):
    """CrossEntropyLoss's targets: num_classes is a size like the batch, and the targets' bounds follow it
    ([0, num_classes - 1] in every case), so the correctness cases shrink the classes too; the inputs drawn
    for each case stay below its classes, and check computes the references."""
    code, out, err = _import(tmp_path, CROSS_ENTROPY, capsys)
    assert code == 0, err
    assert "num_classes stays" not in out and "targets uniform [0, num_classes - 1]" in out
    w = load_workload(tmp_path / "out")
    targets = next(p for p in w.params if p.name == "targets")
    assert (str(targets.low), str(targets.high)) == ("0", "num_classes - 1")
    assert [str(e) for e in w.params[0].shape] == ["batch_size", "num_classes"]
    assert all(c.sizes["batch_size"] < 4096 and c.sizes["num_classes"] < 1000 for c in w.cases[1:])
    for case in w.cases:
        job = next(j for j in array_jobs(w, case) if j.name == "targets")
        drawn = generate_input(job, case.name, 1)
        assert drawn.min() >= 0 and drawn.max() <= case.sizes["num_classes"] - 1, case.name
    assert main(["check", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("ok    reference") >= 2 and "FAIL" not in printed


def test_an_unsupported_dtype_is_refused_before_anything_is_allocated(tmp_path, capsys):
    """get_inputs() of a terabyte-sized int8 input: one line naming the dtype, in seconds, no MemoryError."""
    source = CROSS_ENTROPY.replace("torch.randint(0, num_classes, (batch_size,))",
                                   "torch.randint(0, 9, (batch_size, 10**9), dtype=torch.int8)") \
        .replace("cross_entropy(predictions, targets)", "mse_loss(predictions, predictions)")
    t0 = time.monotonic()
    code, _, err = _import(tmp_path, source, capsys)
    assert code == 2 and "get_inputs()[1] is int8; warpsmith workloads hold" in err, err
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - t0 < 60


def test_one_size_with_a_symmetric_input_passes_check(tmp_path, capsys):
    """One constant N (reduction max(N)), a symmetric input: imported with its structure kept (said so),
    and check computes the references (the tolerance's max(N) is N)."""
    code, out, err = _import(tmp_path, ONE_SIZE, capsys)
    assert code == 0, err
    assert "inputs: A uniform [0, 1], symmetric" in out and "not kept" not in out
    w = load_workload(tmp_path / "out")
    assert str(w.tolerance.reduction) == "max(N)" and "A symmetric" in w.description
    assert w.inputs[0].structure == "symmetric"
    assert main(["check", str(tmp_path / "out")]) == 0, capsys.readouterr().out


HINGE = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0)) * self.scale

batch_size = 32768
input_shape = (32768,)

def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, 2, (batch_size,)).float() * 2 - 1]

def get_init_inputs():
    return []
'''


def test_constants_broadcasting_ties_together_move_as_one_size(tmp_path, capsys):
    """(B, I) * (B,) runs only when I == B: input_shape follows batch_size (said so), both shrink in the
    cases, the reference runs them equal; a 0-d parameter is an input of one element; the +-1 targets
    are drawn as signs; check passes without touching the 4 GiB problem case."""
    code, out, err = _import(tmp_path, HINGE, capsys)
    assert code == 0, err
    assert "not kept: input_shape moves with batch_size: the Model runs only when they are equal" in out
    assert "targets sign (-1 and 1)" in out
    w = load_workload(tmp_path / "out")
    shapes = {p.name: [str(e) for e in p.shape] for p in w.arrays}
    assert shapes["predictions"] == ["batch_size", "batch_size"] and shapes["scale"] == ["1"]
    assert main(["check", str(tmp_path / "out")]) == 0, capsys.readouterr().out


DEPTHWISE = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = torch.nn.Conv2d(in_channels, out_channels, kernel_size, groups=in_channels, bias=False)

    def forward(self, x):
        return self.conv(x)

batch_size = 16
in_channels = 128
out_channels = 128
kernel_size = 3
height = 64
width = 96

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
'''


def test_a_depthwise_convolutions_channels_move_together(tmp_path, capsys):
    """groups=in_channels: out_channels must stay a multiple of in_channels, so neither moves alone;
    together they do: one size, the cases shrink it, kernel_size stays 3."""
    code, out, err = _import(tmp_path, DEPTHWISE, capsys)
    assert code == 0, err
    assert "not kept: out_channels moves with in_channels: the Model runs only when they are equal" in out
    w = load_workload(tmp_path / "out")
    shapes = {p.name: [str(e) for e in p.shape] for p in w.arrays}
    assert shapes["conv_weight"] == ["in_channels", "1", "3", "3"]
    assert shapes["out"] == ["batch_size", "in_channels", "height - 2", "width - 2"]
    assert all(c.sizes["in_channels"] < 128 for c in w.cases[1:])
