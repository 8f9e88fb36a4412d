"""`warpsmith import` keeps what a KernelBench-style problem's inputs mean (needs PyTorch, skipped cleanly
without it): Python numbers become scalars the kernel takes by value, with the problem's values in the
reference and the baseline; bool masks are bool inputs; the structure get_inputs() builds is drawn in every
case; torch.rand and torch.randn inputs are drawn from those distributions."""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path

import numpy as np
import pytest

from warpsmith.agent.cli.commands import main
from warpsmith.agent.spec.inputs import as_float64, generate_inputs
from warpsmith.agent.spec.references import compute_reference
from warpsmith.agent.spec.workload import load_workload

torch = pytest.importorskip("torch")

SCALARS = '''
import torch

class Model(torch.nn.Module):
    def forward(self, A, s, k, flag):
        return A * s + k if flag is True else A

M = 64
N = 48

def get_inputs():
    return [torch.rand(M, N), 3.14, 7, True]

def get_init_inputs():
    return []
'''

MASKED_CUMSUM = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=self.dim)

batch_size = 256
input_shape = (512,)
dim = 1

def get_inputs():
    x = torch.rand(batch_size, *input_shape)
    return [x, torch.randint(0, 2, x.shape).bool()]

def get_init_inputs():
    return [dim]
'''

STRUCTURED = '''
import torch

class Model(torch.nn.Module):
    def forward(self, U, L, P, m, t, h):
        return (U @ L) * P.sum(-1, keepdim=True) + m * t + h

N = 64

def get_inputs():
    return [torch.triu(torch.rand(N, N)), torch.tril(torch.rand(N, N)), torch.softmax(torch.rand(N, N), dim=-1),
            (torch.rand(N, N) > 0.5).float(), torch.randint(0, 2, (N, N)) * 2 - 1, torch.rand(N, N).round() * 1.5 + 0.5]

def get_init_inputs():
    return []
'''

SPARSE = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x, keep, drop, flip):
        return x * keep + drop + flip

N = 256

def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N) < 0.1, (torch.rand(N, N) > 0.8).float(), torch.randint(0, 2, (N, N)) * 2 - 1]

def get_init_inputs():
    return []
'''

DRAWN = '''
import torch

class Model(torch.nn.Module):
    def forward(self, a, b, c, d, e):
        return a + b + c + d + e

N = 4096

def get_inputs():
    return [torch.randn(N), torch.rand(N), torch.randn(N) * 0.1, torch.rand(N).mul_(3), torch.empty(N).uniform_(-2, 5)]

def get_init_inputs():
    return []
'''


def _import(tmp_path: Path, source: str, capsys) -> tuple[Path, str]:
    problem = tmp_path / "problem_file.py"
    problem.write_text(source)
    code = main(["import", str(problem), str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return tmp_path / "out", captured.out


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"imported_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_python_numbers_are_scalars_the_kernel_takes_by_value(tmp_path, capsys):
    """A float, an int and a bool of get_inputs(): by-value scalars in forward's order (float32, int32, int32),
    the problem's values in the spec, in the reference (which computes A * 3.14 + 7 from them, the bool still
    True) and in the baseline; check computes the references."""
    d, out = _import(tmp_path, SCALARS, capsys)
    assert "kernel arguments: const float* A, float s, int k, int flag, float* out, int M, int N" in out
    assert "s = 3.14 by value (float32); k = 7 by value (int32); flag = True by value (int32)" in out
    w = load_workload(d)
    scalars = [(p.name, p.dtype, str(p.value)) for p in w.params if p.role == "scalar"]
    assert scalars == [("s", "float32", "3.14"), ("k", "int32", "7"), ("flag", "int32", "1"),
                       ("M", "int32", "M"), ("N", "int32", "N")]
    case = w.cases[1]
    assert w.params[1].arg(case) == ("f32", 3.14)
    x = generate_inputs(w, case, 1)["A"]
    assert np.array_equal(compute_reference(w, case, 1)["out"], as_float64(x, "float32").astype(np.float64) * 3.14 + 7)
    tree = ast.parse((d / "reference.py").read_text())
    assert next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and n.targets[0].id == "SCALARS") == {"s": 3.14, "k": 7, "flag": True}
    baseline = _module(d / "torch_baseline.py").baseline
    a = torch.from_numpy(x)
    result = baseline(A=a, s=3.14, k=7, flag=1, **case.sizes)
    assert torch.equal(result, a * 3.14 + 7)
    assert main(["check", str(d)]) == 0, capsys.readouterr().out


def test_a_bool_mask_is_a_bool_input(tmp_path, capsys):
    """KernelBench's masked cumsum: the mask is a bool input (`const bool*`), drawn False and True, reaching
    the reference as a bool array (its cumsum of x * mask, exactly); check passes."""
    d, out = _import(tmp_path, MASKED_CUMSUM, capsys)
    assert "const float* x, const bool* mask, float* out" in out and "mask bool (False and True)" in out
    w = load_workload(d)
    case = w.cases[-1]
    inputs = generate_inputs(w, case, 1)
    assert inputs["mask"].dtype == np.bool_ and 0.4 < inputs["mask"].mean() < 0.6
    expected = np.cumsum(inputs["x"].astype(np.float64) * inputs["mask"], axis=1)
    assert np.allclose(compute_reference(w, case, 1)["out"], expected, rtol=1e-12, atol=0)
    assert main(["check", str(d)]) == 0, capsys.readouterr().out


def test_the_structure_get_inputs_builds_is_drawn_in_every_case(tmp_path, capsys):
    """Upper and lower triangular, rows summing to 1, a 0/1 mask and +-1 signs are kept in the spec and drawn so
    in every case; values of 0.5 and 2 only are named as lost; the reference computes on the structured values."""
    d, out = _import(tmp_path, STRUCTURED, capsys)
    assert "U uniform [0, 1], upper triangular; L uniform [0, 1], lower triangular" in out
    assert "m mask (0 and 1); t sign (-1 and 1)" in out
    assert "not kept: h: get_inputs() makes it of the values 0.5 and 2 only" in out
    spec = tomllib.loads((d / "workload.toml").read_text())
    drawn = {p["name"]: p.get("structure", "") for p in spec["params"] if p["role"] == "input"}
    assert drawn == {"U": "upper_triangular", "L": "lower_triangular", "P": "rows_sum_to_1", "m": "mask",
                     "t": "sign", "h": ""}
    assert "range" not in next(p for p in spec["params"] if p["name"] == "m")
    w = load_workload(d)
    for case in w.cases:
        x = {k: v.astype(np.float64) for k, v in generate_inputs(w, case, 2).items()}
        assert not np.tril(x["U"], -1).any() and not np.triu(x["L"], 1).any()
        assert np.allclose(x["P"].sum(-1), 1, atol=1e-5) and set(np.unique(x["m"])) <= {0, 1}
        assert set(np.unique(x["t"])) <= {-1, 1} and x["t"].dtype == np.float64
    case = w.cases[1]
    x = {k: v.astype(np.float64) for k, v in generate_inputs(w, case, 1).items()}
    expected = (x["U"] @ x["L"]) * x["P"].sum(-1, keepdims=True) + x["m"] * x["t"] + x["h"]
    assert np.allclose(compute_reference(w, case, 1)["out"], expected, rtol=1e-12)


def test_rand_and_randn_inputs_keep_their_distributions(tmp_path, capsys):
    """torch.randn: drawn from the standard normal (no range); torch.rand: [0, 1]; uniform_(-2, 5): [-2, 5];
    an input computed from a draw (randn * 0.1), or changed in place after it (rand().mul_(3)), from the range
    its values had."""
    d, out = _import(tmp_path, DRAWN, capsys)
    assert "a normal N(0, 1); b uniform [0, 1]; c uniform [" in out and "e uniform [-2, 5]" in out
    w = load_workload(d)
    a, b, c, dd, e = w.inputs
    assert a.distribution == "normal" and b.distribution == c.distribution == "uniform"
    (b_low, b_high), (c_low, c_high), (d_low, d_high), (e_low, e_high) = (w.bounds(p, w.cases[0]) for p in (b, c, dd, e))
    assert (b_low, b_high) == (0.0, 1.0) and (e_low, e_high) == (-2.0, 5.0)
    assert 0.2 < c_high < 1 and -1 < c_low < -0.2 and 2.9 < d_high <= 3 and d_low >= 0
    assert "range" not in tomllib.loads((d / "workload.toml").read_text())["params"][0]
    drawn = generate_inputs(w, w.cases[0], 1)["a"]
    assert abs(drawn.std() - 1) < 0.05 and (abs(drawn) > 2).any()


def test_a_mask_keeps_the_share_of_ones_get_inputs_gives_it(tmp_path, capsys):
    """A bool mask of about 10% True and a 0/1 mask of about 20% ones keep those shares (`density`) in every
    case; a fair +-1 draw keeps the default 0.5, written nowhere; check passes."""
    d, out = _import(tmp_path, SPARSE, capsys)
    spec = {p["name"]: p for p in tomllib.loads((d / "workload.toml").read_text())["params"]}
    assert 0.06 <= spec["keep"]["density"] <= 0.14 and 0.15 <= spec["drop"]["density"] <= 0.25
    assert "density" not in spec["flip"] and "density" not in spec["x"]
    assert f"keep bool (False and True, {spec['keep']['density']:g} of them True)" in out
    w = load_workload(d)
    x = generate_inputs(w, w.case("problem"), 1)  # 256 x 256: a share within 0.01 of its density
    assert abs(x["keep"].mean() - spec["keep"]["density"]) < 0.01 and abs(x["drop"].mean() - spec["drop"]["density"]) < 0.01
    assert main(["check", str(d)]) == 0, capsys.readouterr().out
