"""Hopper features in the launch spec and the compiler, checked without a GPU: the
arch-specific target (sm_90a) for sources that need it, TMA descriptor arguments
(``tma:NAME:box=RxC``) resolved from the array's shape and refused by the driver's
rules in one line, thread block clusters on program steps, and the bf16 cuBLAS
baseline's operands. tests/test_gpu_hopper.py runs them on an H200."""

from __future__ import annotations

import shutil

import pytest
from workload_factory import ROOT

from warpsmith.agent.evaluate.records import CandidateSpec
from warpsmith.agent.runtime import native
from warpsmith.agent.runtime.arch_target import target_arch
from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.launch import Launch, Program, StepArg
from warpsmith.agent.spec.tensor_map import TensorMap
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError, array_layouts

BF16_GEMM = ROOT / "examples" / "bf16_gemm"
# ptxas accepts these two only for the arch-specific target.
ARCH_SPECIFIC = r'''extern "C" __global__ void grow(int* out) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  asm volatile("wgmma.fence.sync.aligned;\n");
  out[0] = 1;
}
'''
TMA_KERNEL = r'''struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void tma_probe(const __grid_constant__ CUtensorMap a, __nv_bfloat16* c, int m) {}
'''


def test_wgmma_and_setmaxnreg_need_sm_90a():
    """ptxas refuses wgmma/setmaxnreg for sm_90 and accepts them for sm_90a (real NVRTC)."""
    native.nvrtc()
    plain = native.nvrtc_compile(ARCH_SPECIFIC, "grow.cu", "grow", [], "sm_90")
    assert not plain.ok and "not supported on .target 'sm_90'" in plain.log
    specific = native.nvrtc_compile(ARCH_SPECIFIC, "grow.cu", "grow", [], "sm_90a")
    assert specific.ok, specific.log


def test_a_source_that_needs_sm_90a_compiles_for_it():
    """compile_kernel for a 9.0 device picks sm_90a for a wgmma source and keeps sm_90 for the rest."""
    r = compile_kernel(ARCH_SPECIFIC, "grow", "sm_90", use_cache=False)
    assert r.ok and r.arch == "sm_90a", r.log
    plain = compile_kernel('extern "C" __global__ void k(int* x) { x[0] = 1; }', "k", "sm_90", use_cache=False)
    assert plain.ok and plain.arch == "sm_90"


@pytest.mark.parametrize("arch,source,expected", [
    ("sm_90", "wgmma.mma_async", "sm_90a"), ("sm_90", "setmaxnreg.dec", "sm_90a"),
    ("sm_100", "tcgen05.mma", "sm_100a"), ("sm_90", "#if __CUDA_ARCH_FEAT_SM90_ALL", "sm_90a"),
    ("sm_90", "cp.async.bulk.tensor.2d", "sm_90"),  # TMA runs on plain sm_90
    ("sm_80", "wgmma.mma_async", "sm_80"),  # no arch-specific target: ptxas says why
    ("sm_90a", "wgmma.mma_async", "sm_90a"), ("sm_90", "int wgmmaCount;", "sm_90"),
])
def test_target_arch_rules(arch, source, expected):
    """The arch-specific target is taken only when the source asks and the architecture has one."""
    assert target_arch(arch, source) == expected


def test_tma_argument_parses_and_writes_back():
    """tma:NAME:box=RxC[:swizzle=S] parses to expressions over knobs and writes back unchanged."""
    for text in ("tma:A:box=BM x BK:swizzle=128B", "tma:B:box=64x64", "tma:B:box=max(BK, 16) x min(BN, 256)"):
        arg = StepArg.parse(text)
        assert StepArg.parse(arg.text()) == arg
    arg = StepArg.parse("tma:A:box=BM x BK:swizzle=128B")
    assert (arg.name, arg.kind, arg.tma.swizzle) == ("A", "tma", "128B") and str(arg.tma.box[0]) == "BM"
    assert [str(e) for e in StepArg.parse("tma:B:box=max(BK, 16)x(BN)").tma.box] == ["max(BK, 16)", "(BN)"]


@pytest.mark.parametrize("text", ["tma:A", "tma:A:box=64", "tma:A:box=64x64x2", "tma:A:box=64x64:swizzle=16B",
                                  "tma:A:box=64x64:mode=x", "tma::box=64x64", "tma:A:box=64x(1"])
def test_malformed_tma_arguments_are_refused(text):
    """A TMA argument that does not follow the form is a ValueError naming it."""
    with pytest.raises(ValueError) as e:
        StepArg.parse(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("tm,problem", [
    (TensorMap("bfloat16", 128, 128, 512, 64, 0), "1 to 256"),
    (TensorMap("bfloat16", 128, 128, 64, 4, 0), "multiple of 16 bytes (8 B)"),
    (TensorMap("bfloat16", 128, 128, 64, 128, 128), "spans at most 128 B (256 B)"),
    (TensorMap("bfloat16", 128, 100, 64, 64, 0), "row pitch"),
])
def test_the_drivers_tma_rules_refuse_in_one_line(tm, problem):
    """Box size, 16-byte inner span, swizzle span and row pitch follow cuTensorMapEncodeTiled's rules."""
    found = tm.problems()
    assert found and problem in found and "\n" not in found


def test_a_good_tma_box_passes():
    """A 64x64 bf16 box with 128B swizzle over a 4096x4096 array is what a wgmma kernel asks for."""
    assert TensorMap("bfloat16", 4096, 4096, 64, 64, 128).problems() is None
    assert TensorMap("float32", 100, 8, 100, 8, 32).problems() is None


def _with_program(tmp_path, steps: str, source: str = TMA_KERNEL):
    d = tmp_path / "w"
    shutil.copytree(BF16_GEMM, d)
    (d / "probe.cu").write_text(source)
    text = (d / "workload.toml").read_text()
    (d / "workload.toml").write_text(text.replace("[[cases]]", f"[kernels.probe]\nsource = \"probe.cu\"\n\n{steps}\n"
                                                  "[[cases]]", 1))
    return d


PROBE = """[[kernels.probe.steps]]
entry = "tma_probe"
grid = ["ceil_div(M, 64)", 2]
block = [128]
cluster = [1, {cluster}]
args = ["{tma}", "C", "M"]
"""


def test_a_tma_program_resolves_to_a_descriptor_per_case(tmp_path):
    """The descriptor carries the array's dtype and shape on the case and the box; the runner gets a 7-tuple."""
    w = load_workload(_with_program(tmp_path, PROBE.format(cluster=2, tma="tma:A:box=64x64:swizzle=128B")))
    c = Candidate.from_spec(w.kernels["probe"])
    case = w.case("odd-97x88x72")
    job = c.program.resolve(c.launch_env(case), {p.name: p.arg(case) for p in w.params if p.role == "scalar"},
                            array_layouts(w, case))
    step = job.steps[0]
    assert step.launch.cluster == (1, 2, 1) and step.launch.problems() is None
    assert step.args[0].tensor_map == TensorMap("bfloat16", 97, 72, 64, 64, 128)
    assert step.args[0].native(lambda name: {"A": 0x1000}[name]) == ("tma", (0x1000, "bfloat16", 97, 72, 64, 64, 128))
    assert step.args[1].native(lambda name: 0x2000) == ("ptr", 0x2000)


def test_a_tma_descriptor_of_a_3d_array_flattens_its_leading_dimensions():
    """attention's q, k, v (BH x S x D) are (BH * S) x D maps for fa3: 128 query rows or BN keys by 64 columns."""
    w = load_workload(ROOT / "examples" / "attention_bf16")
    c = Candidate.from_spec(w.kernels["fa3"], {"BN": 64})
    case = w.case("2x129-d128-causal")
    job = c.program.resolve(c.launch_env(case), {p.name: p.arg(case) for p in w.params if p.role == "scalar"},
                            array_layouts(w, case))
    maps = [a.tensor_map for a in job.steps[0].args[:3]]
    assert maps == [TensorMap("bfloat16", 258, 128, 128, 64, 128), TensorMap("bfloat16", 258, 128, 64, 64, 128),
                    TensorMap("bfloat16", 258, 128, 64, 64, 128)]
    assert all(m.problems() is None for m in maps)
    with pytest.raises(ValueError, match="two or more dimensions"):
        StepArg.parse("tma:x:box=64x64").tma.resolve({}, {"x": ("float32", (4096,))})


def test_a_tma_program_round_trips_through_the_candidate_record(tmp_path):
    """CandidateSpec (sessions, MLflow, the model) keeps the descriptor and the cluster."""
    w = load_workload(_with_program(tmp_path, PROBE.format(cluster=2, tma="tma:A:box=64x64:swizzle=128B")))
    c = Candidate.from_spec(w.kernels["probe"])
    again = CandidateSpec.model_validate_json(CandidateSpec.from_candidate(c, "tune").model_dump_json()).to_candidate()
    assert again.program == c.program
    assert "cluster (1, 2, 1)" in c.program.describe()[0] and "tma:A:box=64x64:swizzle=128B" in c.program.describe()[0]


@pytest.mark.parametrize("cluster,tma,problem", [
    (2, "tma:A:box=300x64", "each box dimension must be 1 to 256"),
    (2, "tma:M:box=64x64", "a TMA descriptor needs an array parameter, and 'M' is not one"),
    (2, "tma:A:box=64x4", "inner box dimension must span a multiple of 16 bytes"),
    (3, "tma:A:box=64x64", "not a multiple of cluster (1, 3, 1)"),
    (16, "tma:A:box=64x64", "more than the portable 8"),
])
def test_a_bad_descriptor_or_cluster_is_refused_at_load(tmp_path, cluster, tma, problem):
    """The workload checker refuses a descriptor or a cluster the driver would refuse, naming the kernel, in one line."""
    with pytest.raises(SpecError) as e:
        load_workload(_with_program(tmp_path, PROBE.format(cluster=cluster, tma=tma)))
    assert "kernels.probe" in str(e.value) and problem in str(e.value) and "\n" not in str(e.value)


def test_cluster_launch_problems():
    """A cluster must divide the grid, stay within 8 blocks and have no dimension below 1."""
    assert Launch((4, 2, 1), (128, 1, 1), 0, (2, 2, 1)).problems() is None
    assert "below 1" in Launch((4, 2, 1), (128, 1, 1), 0, (0, 1, 1)).problems()
    assert Program.from_data([{"entry": "k", "grid": [4], "block": [32], "args": [], "cluster": [2]}]).launches[0] \
        .launch.clustered


def test_bf16_cublas_baseline_needs_bf16_operands(tmp_path):
    """cublas_gemm_bf16 over float32 arrays is refused where the workload names them."""
    d = tmp_path / "w"
    shutil.copytree(BF16_GEMM, d)
    text = (d / "workload.toml").read_text()
    (d / "workload.toml").write_text(text.replace('name = "C"\nrole = "output"\ndtype = "bfloat16"',
                                                  'name = "C"\nrole = "output"\ndtype = "float32"'))
    with pytest.raises(SpecError) as e:
        load_workload(d)
    assert "baseline.c" in str(e.value) and "bfloat16" in str(e.value)


def test_bf16_gemm_compares_with_cublas_and_torch():
    """The example names cuBLAS bf16 first, then torch eager and torch.compile."""
    w = load_workload(BF16_GEMM)
    assert w.baseline.kinds() == ["cublas_gemm_bf16", "torch_eager", "torch_compile"]
    assert w.tolerance.accumulate == "float32"
