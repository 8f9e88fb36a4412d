"""The host memory a reference needs beyond its arrays: an imported KernelBench workload's reference.py
says it (reference_memory(), traced on PyTorch's meta device), the bound holds against the real float64
run's peak, and check and eval refuse a case it would not fit in one line (needs PyTorch for the imported
references; the rest runs without it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from package_env import child_env
from workload_factory import make_sgemm_workload

from warpsmith.agent.cli.commands import main
from warpsmith.agent.spec.inputs import ReferenceFailed
from warpsmith.agent.spec.reference_memory import declares_estimate, reference_memory
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.worker.footprint import case_footprint

CHAIN = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.exp(x * 2).sum(-1, keepdim=True) - torch.tanh(x).mean(-1, keepdim=True)

rows = 4096
cols = 16384

def get_inputs():
    return [torch.rand(rows, cols)]

def get_init_inputs():
    return []
'''

CONV = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = torch.nn.Conv2d(in_channels, out_channels, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))

batch_size = 32
in_channels = 16
out_channels = 32
size = 160

def get_inputs():
    return [torch.rand(batch_size, in_channels, size, size)]

def get_init_inputs():
    return [in_channels, out_channels]
'''

# A fresh process runs one case's reference (in its own child, as check and eval do) and prints the
# largest resident size its children reached: nothing else of the test run is in that figure.
PEAK = ("import resource, sys\nfrom warpsmith.agent.spec.references import compute_reference\n"
        "from warpsmith.agent.spec.workload import load_workload\nw = load_workload(sys.argv[1])\n"
        "compute_reference(w, w.case(sys.argv[2]), 1)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n")


def _imported(tmp_path: Path, source: str, capsys) -> Path:
    pytest.importorskip("torch")
    problem = tmp_path / "problem_file.py"
    problem.write_text(source)
    assert main(["import", str(problem), str(tmp_path / "out")]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return tmp_path / "out"


@pytest.mark.parametrize("source", [CHAIN, CONV], ids=["elementwise-chain", "convolution"])
def test_the_estimate_bounds_the_references_real_peak(tmp_path, capsys, source):
    """The problem case's float64 reference, run for real: its process peaks well above the arrays alone (what
    was counted before: by more than PyTorch's own memory) and below the arrays plus reference_memory() (a
    convolution's unfolded input included), and the bound is not vacuous (under three times the peak)."""
    d = _imported(tmp_path, source, capsys)
    w = load_workload(d)
    case = w.case("problem")
    arrays, extra = case_footprint(w, case, "host"), reference_memory(w, [case])["problem"]
    done = subprocess.run([sys.executable, "-P", "-c", PEAK, str(d), "problem"], capture_output=True, text=True,
                          env=child_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.split()[-1])
    assert peak - arrays > 600 << 20, (arrays, extra, peak)  # more than PyTorch itself (about 300 MiB) holds
    assert peak <= arrays + extra < 3 * peak, (arrays, extra, peak)


def test_check_and_eval_refuse_a_case_whose_reference_would_not_fit(tmp_path, capsys, monkeypatch):
    """On a host (a double: MemAvailable as reported) where the arrays fit but not the reference's own memory,
    check fails the case in one line naming both parts, and eval refuses before any GPU work, exit 2."""
    d = _imported(tmp_path, CHAIN, capsys)
    w = load_workload(d)
    smallest = w.cases[1]
    arrays, extra = case_footprint(w, smallest, "host"), reference_memory(w, [smallest])[smallest.name]
    from warpsmith.agent.worker import footprint
    monkeypatch.setattr(footprint, "host_available_bytes", lambda: int((arrays + extra / 2) / footprint.HOST_FRACTION))
    assert main(["check", str(d)]) == 2
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("FAIL  memory"))
    assert f"case '{smallest.name}' needs" in line and "of arrays" in line and "more by reference.py's " \
        "reference_memory()" in line
    kernel = tmp_path / "k.cu"
    kernel.write_text('extern "C" __global__ void k(const float* x, float* out, int rows, int cols) {}\n')
    code = main(["eval", str(d), "--kernel", str(kernel), "--entry", "k", "--grid", "1", "--block", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "more by reference.py's reference_memory()" in err and len(err.strip().splitlines()) == 1


def test_a_reference_without_an_estimate_is_read_not_run(tmp_path):
    """A hand-written reference.py without reference_memory(): nothing runs, no estimate; one that defines it
    is asked in its own process, case by case."""
    d = make_sgemm_workload(tmp_path / "w")
    w = load_workload(d)
    assert not declares_estimate(w.reference_path) and reference_memory(w, w.cases) == {}
    with (d / "reference.py").open("a") as f:
        f.write("\n\ndef reference_memory(*, M, N, K):\n    return 8 * M * N * 3\n")
    w = load_workload(d)
    assert reference_memory(w, w.cases) == {c.name: 24 * c.sizes["M"] * c.sizes["N"] for c in w.cases}


@pytest.mark.parametrize("body,says", [
    ("    raise ValueError('no meta kernel')\n", "reference_memory() raised ValueError: no meta kernel (case"),
    ("    return -1\n", "reference_memory() returned -1 for case"),
    ("    return 1.5\n", "reference_memory() returned 1.5 for case"),
])
def test_an_estimate_that_fails_is_a_warning_and_the_arrays_still_count(tmp_path, capsys, body, says):
    """reference_memory() raising or returning something other than bytes: one line, check says it counts the
    arrays only and still passes."""
    d = make_sgemm_workload(tmp_path / "w", kernels=("naive",))
    with (d / "reference.py").open("a") as f:
        f.write(f"\n\ndef reference_memory(**sizes):\n{body}")
    w = load_workload(d)
    with pytest.raises(ReferenceFailed, match=re.escape(f"reference.py: {says}")):
        reference_memory(w, w.cases)
    assert main(["check", str(d)]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("warn  memory") and says in line and "counts the arrays only" in line
               for line in out.splitlines()), out
