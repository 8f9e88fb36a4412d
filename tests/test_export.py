"""`warpsmith export`'s kernel.py: a module of its own whose launch() checks CuPy arrays
or torch tensors and launches the kernel with the workload's launch rule. Here, without
a GPU: the module of a stored session is valid Python that imports with the standard
library alone, refuses wrong arrays in one line, and computes the launch, the shapes and
the scalars the workload does. tests/test_gpu_export.py launches it through CuPy and torch."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from workload_factory import ROOT, make_sgemm_workload

from warpsmith.agent.cli.commands import main
from warpsmith.agent.evaluate.records import Best, CandidateSpec
from warpsmith.agent.loop.session import SessionInfo, session_dir
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import Case, array_layouts
from warpsmith.agent.tracking.launch_module import hopper_only, launch_module

FIXTURE = Path(__file__).parent / "fixtures" / "session-before-rehouse"
EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/workload.toml"))
HAS_CUPY = importlib.util.find_spec("cupy") is not None


class CudaArrayDouble:
    """Stands in for a CuPy array (none here: no GPU): shape, dtype and layout through the
    CUDA array interface, which launch() reads from CuPy arrays too. It points at nothing."""

    def __init__(self, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "strides": strides,
                                         "data": (0, False), "version": 3}


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """`warpsmith export` of a stored session (the fixture's two tune attempts, best: the
    tiled kernel with knobs), into out/; returns (out, workload, best)."""
    tmp = tmp_path_factory.mktemp("export")
    workload = load_workload(make_sgemm_workload(tmp / "w"))
    store = tmp / "store"
    directory = session_dir(store, "before-rehouse")
    shutil.copytree(FIXTURE, directory)
    info = SessionInfo.load(directory)
    info.workload = str(workload.directory)
    info.save(directory)
    assert main(["export", "before-rehouse", str(tmp / "out"), "--store", str(store)]) == 0
    from warpsmith.agent.loop.session import stored_session
    return tmp / "out", workload, stored_session(store, "before-rehouse")[1]["best"]


@pytest.fixture(scope="module")
def kernel(exported):
    return _import(exported[0] / "kernel.py", "exported_sgemm_kernel")


def test_export_writes_the_module_beside_the_kernel(exported):
    """kernel.py joins kernel.cu, launch.json and report.md; it parses, and carries the best kernel's source."""
    out, _, best = exported
    assert sorted(p.name for p in out.iterdir()) == ["kernel.cu", "kernel.py", "launch.json", "report.md"]
    tree = ast.parse((out / "kernel.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | \
        {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"cupy", "numpy", "torch"}  # all three inside functions, when launching
    module = _import(out / "kernel.py", "exported_for_source")
    assert module.SOURCE == best.spec.source == (out / "kernel.cu").read_text()
    assert module.ENTRY == json.loads((out / "launch.json").read_text())["entry"]


def test_module_imports_with_the_standard_library_only(exported):
    """Without site-packages (no NumPy, no warpsmith) the module imports and computes a launch."""
    out = exported[0]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import kernel; "
            "print(kernel.launch_config(M=97, N=83, K=61))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(out)], capture_output=True, text=True,
                          timeout=60, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "((2, 1, 1), (128, 1, 1), 0)"  # BN=64, BM=128, TM=TN=8 (the fixture's best)


def _resolved(cand: Candidate, sizes: dict) -> tuple:
    launch = cand.rule_for(Case("x", "correctness", sizes)).resolve(cand.launch_env(Case("x", "correctness", sizes)))
    return launch.grid, launch.block, launch.shared


SIZES = (1, 7, 31, 32, 33, 97, 128, 1000, 4099)


_KIND = {"i32": "int32", "i64": "int64", "f32": "float32", "f64": "float64"}


def _program_steps(module, sizes):
    """The exported program's steps as (entry, grid, block, shared, args by name or (dtype, value))."""
    steps, counts = module.program_config(**sizes)
    values = module.scalars(**sizes)

    def arg(a):
        if a[0] == "array":
            return module.ARRAYS[a[1]][0]
        if a[0] == "workspace":
            return module.WORKSPACE[a[1]][0]
        return (module.SCALARS[a[1]][1], values[a[1]]) if a[0] == "param" else (a[1], a[2])
    return [(s[1], s[2], s[3], s[4], [arg(a) for a in s[5]]) if s[0] == "launch" else ("memset", arg(s[1]))
            for s in steps], list(counts)


def _warpsmith_steps(workload, cand, case):
    scalars = {p.name: p.arg(case) for p in workload.params if p.role == "scalar"}
    job = cand.program.resolve(cand.launch_env(case), scalars, array_layouts(workload, case))
    arg = lambda a: a.array if a.array else (_KIND[a.kind], a.value)
    return ([(s.entry, s.launch.grid, s.launch.block, s.launch.shared, [arg(a) for a in s.args])
             if hasattr(s, "launch") else ("memset", s.target) for s in job.steps], [w.count for w in job.workspace])


def test_launch_arithmetic_matches_the_workload(exported, kernel):
    """For sizes around every tile edge, launch_config, the shapes and the scalars equal warpsmith's own."""
    _, workload, best = exported
    cand = best.spec.to_candidate()
    for m, n, k in itertools.product(SIZES, repeat=3):
        sizes = {"M": m, "N": n, "K": k}
        assert kernel.launch_config(**sizes) == _resolved(cand, sizes)
        case = Case("x", "correctness", sizes)
        assert list(kernel._shapes(sizes)) == [workload.shape(p, case) for p in workload.arrays]
        assert list(kernel.scalars(**sizes)) == [p.arg(case)[1] for p in workload.params if p.role == "scalar"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_kernel_exports_with_its_launch_rule(example, tmp_path):
    """Each shipped kernel, exported as a best: its module's launch and sizes_of agree with the
    workload for every case's sizes and for sizes scaled off them (odd, even, prime)."""
    workload = load_workload(ROOT / "examples" / example)
    for name, spec in workload.kernels.items():
        cand = Candidate.from_spec(spec)
        best = Best(spec=CandidateSpec.from_candidate(cand, "start"), score_ms=1.0, cases=[], iteration=0)
        if hopper_only(cand):  # TMA descriptors, clusters, sm_90a: the runner's alone so far
            with pytest.raises(ValueError, match="cannot be exported as a module yet"):
                launch_module(workload, best)
            continue
        path = tmp_path / f"{example}_{name}.py"
        path.write_text(launch_module(workload, best))
        module = _import(path, f"exported_{example}_{name}")
        for case in workload.cases:
            for scale in (1, 3, 7):
                sizes = {k: max(1, v // scale + (scale > 1)) for k, v in case.sizes.items()}
                scaled = Case("x", "correctness", sizes)
                assert module.launch_config(**sizes) == _resolved(cand, sizes), (name, sizes)
                if cand.program is not None:  # every step and workspace size, as warpsmith resolves them
                    assert _program_steps(module, sizes) == _warpsmith_steps(workload, cand, scaled), (name, sizes)
                if any(p.dtype == "bfloat16" for p in workload.arrays):
                    continue  # the CUDA array interface has no bfloat16 typestr (nor has CuPy the dtype)
                arrays = [CudaArrayDouble(workload.shape(p, scaled), np.dtype(p.dtype).str) for p in workload.arrays]
                assert module.sizes_of(*arrays) == {k: v for k, v in sizes.items() if k in module.NEEDED}


def _refusal(kernel, *arrays, **sizes) -> str:
    with pytest.raises((TypeError, ValueError)) as e:
        kernel.sizes_of(*arrays, **sizes)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_wrong_arrays_are_refused_in_one_line_naming_the_parameter(kernel):
    """dtype, rank, shape, layout, count, CPU arrays, unknown or zero sizes: each names what and expected what."""
    A, B, C = CudaArrayDouble((5, 7)), CudaArrayDouble((7, 3)), CudaArrayDouble((5, 3))
    assert kernel.sizes_of(A, B, C) == {"M": 5, "K": 7, "N": 3}
    assert _refusal(kernel, A, CudaArrayDouble((7, 3), "<f8"), C) == "sgemm: B is float64, expected float32"
    assert _refusal(kernel, A, CudaArrayDouble((7, 3), "<i4"), C) == "sgemm: B is int32, expected float32"
    assert _refusal(kernel, A, CudaArrayDouble((6, 3)), C) == "sgemm: B has shape (6, 3), expected (K, N) = (7, 3)"
    assert _refusal(kernel, A, B, CudaArrayDouble((5, 4))) == "sgemm: C has shape (5, 4), expected (M, N) = (5, 3)"
    assert _refusal(kernel, CudaArrayDouble((5, 7, 1)), B, C) == \
        "sgemm: A has 3 dimensions (5, 7, 1), expected 2 (M, K)"
    transposed = CudaArrayDouble((7, 3), strides=(4, 28))
    assert "B is not dense row-major" in _refusal(kernel, A, transposed, C)
    assert _refusal(kernel, A, B) == "sgemm: takes 3 arrays (A, B, C), got 2"
    assert "A is a numpy.ndarray, not on the GPU" in _refusal(kernel, np.zeros((5, 7), np.float32), B, C)
    assert _refusal(kernel, A, B, C, Q=3) == "sgemm: unknown size 'Q' (the sizes are M, N, K)"
    assert _refusal(kernel, A, B, C, M=2.5) == "sgemm: size M = 2.5 is not an integer"
    empty = CudaArrayDouble((0, 7))
    assert "size M = 0; the kernel was validated for sizes of at least 1" in \
        _refusal(kernel, empty, B, CudaArrayDouble((0, 3)))


def test_a_size_given_as_keyword_must_agree_with_the_arrays(kernel):
    """M=6 against a 5-row A is refused as A's shape, not launched over."""
    A, B, C = CudaArrayDouble((5, 7)), CudaArrayDouble((7, 3)), CudaArrayDouble((5, 3))
    assert _refusal(kernel, A, B, C, M=6) == "sgemm: A has shape (5, 7), expected (M, K) = (6, 7)"


def test_launch_limits_are_checked_before_the_gpu(kernel):
    """A grid past CUDA's y limit (65535 blocks of BM rows) is one line, not a launch failure."""
    with pytest.raises(ValueError, match="exceeds CUDA's limits"):
        kernel.launch_config(M=128 * 65536, N=64, K=1)


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed: launch() would reach for the GPU")
def test_launch_without_cupy_says_how_to_install_it(kernel):
    """Right arrays but no CuPy: one line saying what to install."""
    with pytest.raises(ImportError, match="pip install cupy-cuda13x"):
        kernel.launch(CudaArrayDouble((5, 7)), CudaArrayDouble((7, 3)), CudaArrayDouble((5, 3)))


def test_model_written_strings_stay_data(exported, tmp_path):
    """A source, entry and name full of quotes and Python come back as the same strings; nothing runs."""
    _, workload, best = exported
    hostile = '// """ \'\'\' \\\nraise SystemExit(3)  # """\n' + best.spec.source
    spec = best.spec.model_copy(update={"source": hostile, "entry": "sgemm_tiled'''\"\"\"", "name": 'x"""\nimport os'})
    path = tmp_path / "hostile.py"
    path.write_text(launch_module(workload, best.model_copy(update={"spec": spec})))
    module = _import(path, "exported_hostile")
    assert (module.SOURCE, module.ENTRY, module.KERNEL) == (hostile, spec.entry, spec.name)


@pytest.mark.parametrize("change,why", [
    ({"options": ["--time=/tmp/x"]}, "compile option '--time=/tmp/x' is not allowed"),
    ({"options": ["--use_fast_math"]}, "lowers floating-point precision"),
    ({"source": '#include "/proc/self/environ"\n'}, "only these headers may be included"),
])
def test_a_tampered_best_is_not_exported(exported, change, why):
    """Options or includes the compiler would refuse never reach the user's NVRTC through the module."""
    _, workload, best = exported
    with pytest.raises(ValueError, match="cannot be exported") as e:
        launch_module(workload, best.model_copy(update={"spec": best.spec.model_copy(update=change)}))
    assert why in str(e.value)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
def test_the_torch_op_is_registered_once_with_a_fake(kernel):
    """torch.ops.warpsmith.sgemm(A, B) -> C: its schema passes opcheck, its fake gives C's shape on the
    meta device (what torch.compile traces with), and CPU tensors find no kernel, once registered."""
    import torch
    op = kernel.register_torch_op()
    assert kernel.register_torch_op() is op and torch.ops.warpsmith.sgemm is op
    A, B = torch.empty(97, 61, device="meta"), torch.empty(61, 83, device="meta")
    C = op(A, B)
    assert (tuple(C.shape), C.dtype, C.device.type) == ((97, 83), torch.float32, "meta")
    assert torch.library.opcheck(op, (A, B), test_utils=("test_schema",)) == {"test_schema": "SUCCESS"}
    with pytest.raises(NotImplementedError):
        op(torch.zeros(3, 4), torch.zeros(4, 5))
    with pytest.raises(TypeError, match="A is a CPU tensor; pass a CUDA tensor"):
        kernel.launch(torch.zeros(3, 4), torch.zeros(4, 5), torch.zeros(3, 5))
