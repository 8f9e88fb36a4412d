"""`warpsmith import PROBLEM.py DIR`: a KernelBench-style PyTorch problem becomes a workload.

Without PyTorch: broken problem files are refused in one line (no Model, no get_inputs,
inputs that are not tensors, a problem that never answers within the time limit), nothing
is left behind, and the workload files are written from the probe's data. With PyTorch
(skipped cleanly without it): the ten problems of examples/kernelbench import and pass
`warpsmith check`, from their README's commands."""

from __future__ import annotations

import ast
import importlib.util
import shlex
import tomllib
from pathlib import Path

import pytest
from workload_factory import ROOT

from warpsmith.agent.cli.commands import main
from warpsmith.agent.spec.kernelbench import ImportRefused, ProblemArray, ProblemProbe, StartKernel, write_workload
from warpsmith.agent.spec.kernelbench_model import load_problem, problem_constants
from warpsmith.agent.spec.workload import load_workload

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
KERNELBENCH = ROOT / "examples" / "kernelbench"
README_COMMANDS = [line.strip() for line in (KERNELBENCH / "README.md").read_text().splitlines()
                   if line.strip().startswith("warpsmith import ")]


def _import(tmp_path, source: str, *extra: str, capsys=None) -> tuple[int, str]:
    problem = tmp_path / "problem_file.py"
    problem.write_text(source)
    code = main(["import", str(problem), str(tmp_path / "out"), *extra])
    return code, capsys.readouterr().err if capsys else ""


def _nothing_left(tmp_path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["problem_file.py"]


@pytest.mark.parametrize("source,says", [
    ("def get_inputs():\n    return []\n", "defines no Model, get_init_inputs: a KernelBench-style problem defines"),
    ("class Model:\n    pass\n\ndef get_init_inputs():\n    return []\n", "defines no get_inputs"),
    ("class Model:\n    pass\n\ndef get_inputs():\n    return [1, 2.0]\n\ndef get_init_inputs():\n    return []\n",
     "get_inputs() returned only Python numbers; it must return a tensor too"),
    ("class Model:\n    pass\n\ndef get_inputs():\n    return [[1], 2.0]\n\ndef get_init_inputs():\n    return []\n",
     "get_inputs() returned a list at position 0; every input must be a torch.Tensor or a Python number"),
    ("class Model:\n    pass\n\ndef get_inputs():\n    return 'x'\n\ndef get_init_inputs():\n    return []\n",
     "get_inputs() returned a str; it must return a non-empty list of tensors"),
    ("class Model:\n    pass\n\ndef get_inputs():\n    return 1 / 0\n\ndef get_init_inputs():\n    return []\n",
     "get_inputs() raised ZeroDivisionError: division by zero"),
    ("def broken(:\n", "problem_file.py: line 1: "),
    ("import not_a_module_anywhere\n", "importing it raised ModuleNotFoundError"),
])
def test_broken_problem_files_are_refused_in_one_line(tmp_path, capsys, source, says):
    """Each broken file: exit 2, one line naming the file and what is wrong, no directory left."""
    code, err = _import(tmp_path, source, capsys=capsys)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    _nothing_left(tmp_path)


def test_a_problem_that_never_answers_is_killed_at_the_limit(tmp_path, capsys):
    """A problem that sleeps forever (at import time) is killed at --reference-timeout: one line."""
    code, err = _import(tmp_path, "import time\ntime.sleep(10**9)\n", "--reference-timeout", "1", capsys=capsys)
    assert code == 2 and "did not answer within 1 s" in err and "raise --reference-timeout" in err
    _nothing_left(tmp_path)


@pytest.fixture
def without_torch(tmp_path, monkeypatch):
    """A double for a machine without PyTorch, in the children (the problem and the reference
    run in child processes): a sitecustomize on their PYTHONPATH puts a finder first that
    answers `import torch` as a missing package does. A stand-in `torch` package would not do:
    the children's PYTHONPATH starts with warpsmith's own root, which for an installed
    warpsmith is the site-packages that holds the real torch."""
    if HAS_TORCH:
        stand_in = tmp_path / "without_torch"
        stand_in.mkdir()
        (stand_in / "sitecustomize.py").write_text(
            "import sys\n\n\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n\n\n"
            "sys.meta_path.insert(0, NoTorch())\n")
        monkeypatch.setenv("PYTHONPATH", str(stand_in))


def test_without_pytorch_one_line_says_how_to_install_it(tmp_path, capsys, without_torch):
    """A real problem without PyTorch installed: one line with the pip command."""
    code, err = _import(tmp_path, (KERNELBENCH / "matmul.py").read_text(), capsys=capsys)
    assert code == 2 and err.strip() == ("warpsmith: error: warpsmith import runs the problem with PyTorch, "
                                         "which is not installed: pip install torch")
    assert not (tmp_path / "out").exists()


def test_a_directory_that_holds_something_is_not_overwritten(tmp_path, capsys):
    """DIR with a file in it: refused before the problem runs."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    code, err = _import(tmp_path, "import time\ntime.sleep(10**9)\n", capsys=capsys)
    assert code == 2 and "exists and is not empty" in err
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep"


@pytest.mark.parametrize("argv,says", [
    (["--grid", "M"], "--entry, --grid and --block describe a --kernel FILE"),
    (["--kernel", "{k}"], "--kernel needs --grid and --block"),
])
def test_kernel_options_go_together(tmp_path, capsys, argv, says):
    """--grid without --kernel, --kernel without a launch rule: one line, before the problem runs."""
    kernel = KERNELBENCH / "matmul.cu"
    code, err = _import(tmp_path, "import time\ntime.sleep(10**9)\n", *[a.format(k=kernel) for a in argv],
                        capsys=capsys)
    assert code == 2 and says in err


MATMUL = ProblemProbe(
    arrays=(ProblemArray("A", "input", "float32", ("M", "K"), -4.5, 4.5),
            ProblemArray("B", "input", "float32", ("K", "N"), -4.5, 4.5),
            ProblemArray("ln_weight", "input", "float32", ("N",), 0.0, 2.0, state_key="ln.weight"),
            ProblemArray("out", "output", "float32", ("M", 1, "N"))),
    sizes={"M": 1024, "K": 4096, "N": 2048},
    cases=({"M": 3, "K": 7, "N": 5}, {"M": 341, "K": 1365, "N": 683}),
    doc="C = A @ B, scaled.")


def test_the_workload_is_written_from_the_probes_data(tmp_path):
    """Arrays in order, then the sizes as int scalars; the problem's sizes timed, the smaller ones
    validated; PyTorch as the baseline; the starting kernel with its rule; every file it names."""
    kernel = StartKernel(KERNELBENCH / "matmul.cu", "matmul_naive", ("ceil_div(N, 16)", "ceil_div(M, 16)"),
                         ("16", "16"))
    d = tmp_path / "w"
    d.mkdir()
    problem = "'''A problem with a ''' in it.'''\n" + (KERNELBENCH / "matmul.py").read_text()
    write_workload(d, "kb_matmul", MATMUL, problem, kernel)
    w = load_workload(d)
    assert [(p.name, p.role) for p in w.params] == [("A", "input"), ("B", "input"), ("ln_weight", "input"),
                                                     ("out", "output"), ("M", "scalar"), ("K", "scalar"),
                                                     ("N", "scalar")]
    assert [str(e) for e in w.params[3].shape] == ["M", "1", "N"] and w.bounds(w.params[2], w.cases[0]) == (0, 2)
    assert [(c.name, c.role, c.sizes) for c in w.cases] == [
        ("problem", "performance", {"M": 1024, "K": 4096, "N": 2048}),
        ("3x7x5", "correctness", {"M": 3, "K": 7, "N": 5}), ("341x1365x683", "correctness", {"M": 341, "K": 1365, "N": 683})]
    assert w.baseline.kind == "torch" and w.baseline.torch.name == "torch_baseline.py"
    assert w.start == "matmul" and w.kernels["matmul"].entry == "matmul_naive"
    assert str(w.tolerance.reduction) == "max(M, K, N)" and not w.tolerance.allow_tf32
    assert problem.rstrip() in w.description and "ln_weight = ln.weight" in w.description
    assert w.bytes.evaluate({"M": 2, "K": 3, "N": 5}) == 4 * (6 + 15 + 5 + 10)
    assert (d / "problem.py").read_text() == problem
    assert (d / "problem_model.py").read_bytes() == (ROOT / "agent" / "spec" / "kernelbench_model.py").read_bytes()
    for name in ("reference.py", "torch_baseline.py"):
        tree = ast.parse((d / name).read_text())
        constants = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     for t in n.targets if isinstance(t, ast.Name) and t.id in ("INPUTS", "STATE", "SIZES")}
        assert constants == {"INPUTS": ("A", "B"), "STATE": {"ln_weight": "ln.weight"},
                             "SIZES": {"M": 1024, "K": 4096, "N": 2048}}


def test_without_a_kernel_the_workload_starts_from_scratch(tmp_path):
    """No --kernel: [start] from_scratch = true and no [kernels.*]."""
    d = tmp_path / "w"
    d.mkdir()
    write_workload(d, "kb_matmul", MATMUL, "x = 1\n", None)
    w = load_workload(d)
    assert w.from_scratch and w.kernels == {}
    assert tomllib.loads((d / "workload.toml").read_text())["start"] == {"from_scratch": True}


def test_check_without_pytorch_names_the_install(tmp_path, capsys, without_torch):
    """warpsmith check of an imported workload without PyTorch: spec and compile ok, the reference one line."""
    d = tmp_path / "w"
    d.mkdir()
    write_workload(d, "kb_matmul", MATMUL, (KERNELBENCH / "matmul.py").read_text(), None)
    assert main(["check", str(d)]) == 2
    out = capsys.readouterr().out
    assert "ok    spec" in out and "reference runs its PyTorch problem: pip install torch" in out


@pytest.mark.parametrize("change", [
    {"sizes": {"../x": 3}}, {"arrays": [{"name": "A", "role": "input", "dtype": "float16", "dims": ["M"]}]},
    {"arrays": [{"name": "A", "role": "input", "dtype": "float32", "dims": ["Q"]}]},
    {"arrays": [{"name": "A", "role": "input", "dtype": "float32", "dims": ["M"], "low": float("inf")}]},
    {"cases": [{"M": 0}]}, {"arrays": [{"name": "A", "role": "input", "dtype": "float32", "dims": ["M"],
                                        "evil": 1}]},
])
def test_a_malformed_probe_answer_is_refused(change):
    """What the probe child answers is checked as data (the problem's code ran there): names, dtypes, dims, ranges."""
    data = {"arrays": [{"name": "A", "role": "input", "dtype": "float32", "dims": ["M"]}], "sizes": {"M": 8},
            "cases": [], **change}
    with pytest.raises(ImportRefused, match="malformed"):
        ProblemProbe.from_json(data)


CONSTANTS = """
batch_size = 16
height = width = 128
D, H, W = (24, 32, 32)
N = 8192 * 2
input_shape = (4096,)
kernel_size = (3, 5)
bias_shape = (batch_size, 1)
scale = 2.0
twice = 1
twice = 2


def get_init_inputs():
    return [batch_size, bias_shape, input_shape, kernel_size]
"""


def test_the_problems_constants_are_its_whole_number_assignments(tmp_path):
    """Literal whole numbers at the top level, each name its own (chained, unpacked, folded, in a tuple);
    a name assigned twice, a float or a computed tuple is no constant."""
    assert problem_constants(CONSTANTS) == {"batch_size": 16, "height": 128, "width": 128, "D": 24, "H": 32, "W": 32,
                                            "N": 16384, "input_shape": 4096, "kernel_size_0": 3, "kernel_size_1": 5}


def test_a_case_runs_the_file_with_its_values_in_place_of_the_constants(tmp_path):
    """What is computed from a constant follows it (bias_shape, get_init_inputs()); what is not a size stays."""
    (tmp_path / "p.py").write_text(CONSTANTS)
    module = load_problem(tmp_path / "p.py", {"batch_size": 3, "width": 7, "input_shape": 5, "N": 9})
    assert (module.height, module.width, module.N, module.bias_shape) == (128, 7, 9, (3, 1))
    assert module.get_init_inputs() == [3, (3, 1), (5,), (3, 5)]
    assert load_problem(tmp_path / "p.py").get_init_inputs() == [16, (16, 1), (4096,), (3, 5)]


# -- with PyTorch (the GPU machine has it) -------------------------------------------------


def _run_readme_command(command: str, tmp_path) -> Path:
    args = shlex.split(command)[1:]
    out = tmp_path / Path(args[2]).name
    args[2] = str(out)
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in args]
    assert main(args) == 0
    return out


@needs_torch
@pytest.mark.parametrize("command", README_COMMANDS, ids=[shlex.split(c)[3] for c in README_COMMANDS])
def test_the_kernelbench_examples_import_and_pass_check(command, tmp_path, capsys):
    """Each README command imports its problem; `warpsmith check` then passes (spec, references, compile)."""
    out = _run_readme_command(command, tmp_path)
    w = load_workload(out)
    assert [c.role for c in w.cases].count("correctness") == 2  # both smaller sizes ran
    assert main(["check", str(out)]) == 0, capsys.readouterr().out
    printed = capsys.readouterr().out
    assert "FAIL" not in printed and "ok    compile" in printed


@needs_torch
def test_layernorms_parameters_become_inputs(tmp_path):
    """nn.LayerNorm's weight and bias are kernel inputs after x, drawn around their initial 1 and 0."""
    out = _run_readme_command(next(c for c in README_COMMANDS if "layernorm.py" in c), tmp_path)
    w = load_workload(out)
    assert [p.name for p in w.params] == ["x", "ln_weight", "ln_bias", "out", "batch_size", "dim"]
    assert (*w.bounds(w.params[1], w.cases[0]), *w.bounds(w.params[2], w.cases[0])) == (0, 2, -1, 1)
    assert [c.sizes for c in w.cases][1] == {"batch_size": 3, "dim": 5}  # LayerNorm(5) ran at 3 x 5


@needs_torch
def test_a_model_tied_to_its_sizes_keeps_only_the_problem_case(tmp_path, capsys):
    """A Model that reshapes to numbers of its own cannot run at other sizes: no size, no correctness
    case, said so; the tolerance still reads the longest dimension."""
    source = (KERNELBENCH / "softmax.py").read_text().replace("torch.softmax(x, dim=1)",
                                                               "torch.softmax(x.view(16, 16384), dim=1)")
    code, _ = _import(tmp_path, source)
    assert code == 0
    assert "not kept: dim stays 16384: the Model does not run when it alone changes" in capsys.readouterr().out
    w = load_workload(tmp_path / "out")
    assert [c.name for c in w.cases] == ["problem"] and str(w.tolerance.reduction) == "16384"


@needs_torch
def test_forward_must_return_tensors(tmp_path, capsys):
    """A forward that returns a number: one line."""
    source = (KERNELBENCH / "softmax.py").read_text().replace("return torch.softmax(x, dim=1)", "return 3")
    code, err = _import(tmp_path, source, capsys=capsys)
    assert code == 2 and "forward returned an int; it must return tensors" in err
    _nothing_left(tmp_path)


def test_the_entry_is_found_after_launch_bounds():
    """Without --entry: the first extern "C" __global__ function, __launch_bounds__ before or after void."""
    from warpsmith.agent.cli.import_problem import _ENTRY
    assert _ENTRY.findall((ROOT / "examples" / "softmax" / "rowblock.cu").read_text()) == ["softmax_rows"]
    assert _ENTRY.findall((KERNELBENCH / "softmax.cu").read_text()) == ["softmax_rows"]
    assert _ENTRY.findall('extern "C" __global__ __launch_bounds__(256) void k2(int n)') == ["k2"]


@needs_torch
def test_a_launch_rule_naming_no_size_is_one_line_and_leaves_nothing(tmp_path, capsys):
    """--grid over a name that is no size: the spec's one line, named as DIR/workload.toml; no folder made."""
    problem = tmp_path / "problem_file.py"
    problem.write_text((KERNELBENCH / "gelu.py").read_text())
    code = main(["import", str(problem), str(tmp_path / "kb" / "gelu"), "--kernel", str(KERNELBENCH / "gelu.cu"),
                 "--grid", "ceil_div(Q, 256)", "--block", "256"])
    err = capsys.readouterr().err
    assert code == 2 and f"{tmp_path / 'kb' / 'gelu' / 'workload.toml'}: kernels.gelu: " in err and "'Q'" in err
    _nothing_left(tmp_path)


def test_a_loaded_problem_is_importable_by_its_name_as_torch_compile_needs():
    """torch.compile imports the module of the forward it traces by name (else an imported
    problem's torch_compile baseline fails with ModuleNotFoundError): each load is in
    sys.modules under a name of its own per file and constants."""
    import importlib
    small = load_problem(KERNELBENCH / "matvec.py", {"M": 64, "K": 128})
    large = load_problem(KERNELBENCH / "matvec.py", {"M": 256, "K": 128})
    assert importlib.import_module(small.Model.forward.__module__) is small
    assert importlib.import_module(large.Model.forward.__module__) is large
