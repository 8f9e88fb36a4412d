"""On a real GPU: the exported module (kernel.py) of examples/sgemm's tiled and
examples/softmax's rowblock kernels launched through CuPy and through torch, on
the caller's current stream (a CUDA graph capture proves it: a launch on any other
stream breaks the capture), and as a torch custom op, each against NumPy in float64."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from workload_factory import ROOT

from warpsmith.agent.evaluate.records import Best, CandidateSpec
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.tolerance import default_rtol
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.launch_module import launch_module

pytestmark = pytest.mark.gpu
needs_cupy = pytest.mark.skipif(importlib.util.find_spec("cupy") is None, reason="needs CuPy")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")


def _module(tmp_path, example: str, kernel: str, defines: dict | None = None):
    workload = load_workload(ROOT / "examples" / example)
    cand = Candidate.from_spec(workload.kernels[kernel], defines)
    best = Best(spec=CandidateSpec.from_candidate(cand, "start"), score_ms=1.0, cases=[], iteration=0)
    path = tmp_path / f"{example}_{kernel}.py"
    path.write_text(launch_module(workload, best))
    spec = importlib.util.spec_from_file_location(f"gpu_exported_{example}_{kernel}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_close(out: np.ndarray, ref: np.ndarray, reduction: int) -> None:
    """The harness's criterion: |out - ref| / (|ref| + rms(ref)) within 8 eps(fp32) sqrt(reduction)."""
    err = np.abs(out.astype(np.float64) - ref) / (np.abs(ref) + np.sqrt(np.mean(ref ** 2)))
    assert np.isfinite(out).all() and err.max() <= default_rtol("float32", reduction), err.max()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def sgemm(tmp_path_factory):
    return _module(tmp_path_factory.mktemp("sgemm"), "sgemm", "tiled", {"BM": 64, "BN": 64, "TM": 8, "TN": 4})


@pytest.fixture(scope="module")
def softmax(tmp_path_factory):
    return _module(tmp_path_factory.mktemp("softmax"), "softmax", "rowblock")


@needs_cupy
@pytest.mark.parametrize("m,n,k", [(97, 83, 61), (1, 257, 33), (512, 384, 256)])
def test_sgemm_through_cupy_on_its_current_stream(sgemm, m, n, k):
    """CuPy arrays in, C written on CuPy's current (non-default) stream, equal to A @ B in float64."""
    import cupy
    rng = np.random.default_rng(m * n * k)
    a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        A, B, C = cupy.asarray(a), cupy.asarray(b), cupy.full((m, n), np.nan, np.float32)
        sgemm.launch(A, B, C)
        stream.synchronize()
    _assert_close(cupy.asnumpy(C), a.astype(np.float64) @ b.astype(np.float64), k)


@needs_cupy
def test_cupy_graph_capture_holds_the_launch(softmax):
    """Captured on a CuPy stream and replayed: the launch went to the capturing (current) stream."""
    import cupy
    x = np.random.default_rng(1).uniform(-4, 4, (33, 4097)).astype(np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        X, Y = cupy.asarray(x), cupy.full(x.shape, np.nan, np.float32)
        softmax.launch(X, Y)  # compiles and loads outside the capture
        Y.fill(np.nan)
        stream.begin_capture()
        softmax.launch(X, Y)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
    _assert_close(cupy.asnumpy(Y), _softmax(x.astype(np.float64)), 4097)


@needs_torch
@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 1000), (64, 50257)])
def test_softmax_through_torch_on_its_current_stream(softmax, rows, cols):
    """Torch tensors in, y written on torch.cuda.current_stream() (a side stream here)."""
    import torch
    x = torch.empty(rows, cols, device="cuda").uniform_(-4, 4)
    y = torch.full_like(x, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        softmax.launch(x, y)
    side.synchronize()
    _assert_close(y.cpu().numpy(), _softmax(x.cpu().double().numpy()), cols)


@needs_torch
def test_torch_graph_capture_holds_the_launch(sgemm):
    """torch.cuda.graph captures the launch: it went to torch's current stream, the capturing one."""
    import torch
    A, B = torch.rand(300, 200, device="cuda") - 0.5, torch.rand(200, 100, device="cuda") - 0.5
    C = torch.full((300, 100), float("nan"), device="cuda")
    sgemm.launch(A, B, C)  # compiles and loads outside the capture
    C.fill_(float("nan"))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sgemm.launch(A, B, C)
    graph.replay()
    torch.cuda.synchronize()
    _assert_close(C.cpu().numpy(), A.cpu().double().numpy() @ B.cpu().double().numpy(), 200)


@needs_torch
def test_torch_custom_op_allocates_and_runs(sgemm, softmax):
    """torch.ops.warpsmith.sgemm(A, B) -> C and .softmax(x) -> y: new outputs, right values,
    fake implementations that pass torch.library.opcheck, and torch.compile through the op."""
    import torch
    mm, sm = sgemm.register_torch_op(), softmax.register_torch_op()
    assert sgemm.register_torch_op() is mm and torch.ops.warpsmith.sgemm is mm
    A, B = torch.rand(97, 61, device="cuda") - 0.5, torch.rand(61, 83, device="cuda") - 0.5
    C = mm(A, B)
    assert C.shape == (97, 83) and C.dtype == torch.float32
    _assert_close(C.cpu().numpy(), A.cpu().double().numpy() @ B.cpu().double().numpy(), 61)
    x = torch.randn(5, 40004, device="cuda")
    _assert_close(sm(x).cpu().numpy(), _softmax(x.cpu().double().numpy()), 40004)
    _assert_close(sm(x.t().contiguous().t()).cpu().numpy(), _softmax(x.cpu().double().numpy()), 40004)
    torch.library.opcheck(mm, (A, B), test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda a, b: torch.relu(mm(a, b)), fullgraph=True)
    _assert_close(compiled(A, B).cpu().numpy(), np.maximum(A.cpu().double().numpy() @ B.cpu().double().numpy(), 0), 61)


@needs_torch
def test_wrong_tensors_are_refused_before_the_gpu(sgemm):
    """A CPU tensor, a float64 tensor: one line each, nothing launched."""
    import torch
    A, B, C = torch.zeros(4, 5, device="cuda"), torch.zeros(5, 6, device="cuda"), torch.zeros(4, 6, device="cuda")
    with pytest.raises(TypeError, match="A is a CPU tensor"):
        sgemm.launch(A.cpu(), B, C)
    with pytest.raises(TypeError, match="B is float64, expected float32"):
        sgemm.launch(A, B.double(), C)


@needs_cupy
def test_export_of_a_real_session_launches_and_matches_numpy(tmp_path, capsys):
    """`warpsmith run` (two tuner attempts on the GPU), then `warpsmith export` of that session:
    its kernel.py, imported on its own, computes A @ B on CuPy arrays of a size no case has."""
    import cupy
    from workload_factory import make_sgemm_workload

    from warpsmith.agent.cli.commands import main
    store, out = tmp_path / "store", tmp_path / "exported"
    w = make_sgemm_workload(tmp_path / "w")
    assert main(["run", str(w), "--proposer", "tune", "--kernel", "tiled", "--budget", "2", "--headless",
                 "--store", str(store), "--no-tracking"]) == 0  # the export reads the session, not MLflow
    (session,) = [p.name for p in (store / "sessions").iterdir()]
    assert main(["export", session, str(out), "--store", str(store)]) == 0
    spec = importlib.util.spec_from_file_location("exported_from_a_session", out / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(7)
    a, b = rng.uniform(-1, 1, (300, 129)).astype(np.float32), rng.uniform(-1, 1, (129, 77)).astype(np.float32)
    C = cupy.full((300, 77), np.nan, np.float32)
    module.launch(cupy.asarray(a), cupy.asarray(b), C)
    cupy.cuda.get_current_stream().synchronize()
    _assert_close(cupy.asnumpy(C), a.astype(np.float64) @ b.astype(np.float64), 129)


@needs_cupy
@pytest.mark.parametrize("kernel", ["splitk", "splitk_warptile"])
def test_a_program_exports_and_runs_every_step_through_cupy(tmp_path, kernel):
    """kernel.py of a split-K program: workspace allocated, both launches in order on the current stream."""
    import cupy
    module = _module(tmp_path, "sgemm", kernel, {"SPLITK": 4})
    assert module.PROGRAM and module.WORKSPACE[0][0] == "partial"
    rng = np.random.default_rng(11)
    a, b = rng.uniform(-1, 1, (97, 1001)).astype(np.float32), rng.uniform(-1, 1, (1001, 83)).astype(np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        C = cupy.full((97, 83), np.nan, np.float32)
        module.launch(cupy.asarray(a), cupy.asarray(b), C)
        stream.synchronize()
    _assert_close(cupy.asnumpy(C), a.astype(np.float64) @ b.astype(np.float64), 1001)


@needs_cupy
def test_an_exported_dispatch_launches_each_shapes_variant(tmp_path):
    """kernel.py of a dispatch (tiles for square shapes, split-K for a long K): each shape runs
    its variant through CuPy and matches NumPy."""
    import sys

    import cupy

    from warpsmith.agent.evaluate.dispatch import Dispatch, DispatchEntry
    from warpsmith.agent.runtime.device_facts import DeviceFacts
    from warpsmith.agent.tracking.best_kernel import write_best
    workload = load_workload(ROOT / "examples" / "sgemm")
    tiled = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["tiled"]), "tune")
    split = CandidateSpec.from_candidate(Candidate.from_spec(workload.kernels["splitk"], {"SPLITK": 16}), "tune")
    d = Dispatch(variants=[tiled, split], score_ms=1.0, single_score_ms=2.0,
                 entries=[DispatchEntry(case="square", sizes={"M": 1024, "N": 1024, "K": 1024}, variant=0, median_ms=1.0),
                          DispatchEntry(case="long-k", sizes={"M": 256, "N": 256, "K": 131072}, variant=1, median_ms=1.0)])
    write_best(tmp_path, workload, Best(spec=tiled, score_ms=2.0, cases=[], iteration=1), None, {}, None,
               DeviceFacts(), module=True, dispatch=d)
    sys.path.insert(0, str(tmp_path))
    try:
        import kernel
        for (m, n, k), expected in (((96, 80, 96), 0), ((64, 48, 20000), 1)):
            assert kernel.variant_for(M=m, N=n, K=k) == expected
            rng = np.random.default_rng(m + k)
            a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
            C = cupy.full((m, n), np.nan, np.float32)
            kernel.launch(cupy.asarray(a), cupy.asarray(b), C)
            cupy.cuda.get_current_stream().synchronize()
            _assert_close(cupy.asnumpy(C), a.astype(np.float64) @ b.astype(np.float64), k)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kernel", None)
