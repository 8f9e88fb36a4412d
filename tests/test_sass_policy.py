"""The precision policy read from the machine code (agent/runtime/sass.py,
agent/spec/precision_policy.py): kernels compiled with real NVRTC for sm_90 and
disassembled with nvdisasm. A float32 kernel that splits its operands into bfloat16
pieces, one that rounds to fp8, and TF32 math where the workload allows none are
refused by instruction name, however the source spells them; what a workload declares
(its arrays' dtypes, allow_tf32, splits) is allowed."""

from __future__ import annotations

import pytest
from workload_factory import ROOT

from warpsmith.agent.evaluate.compile_audit import compile_candidate
from warpsmith.agent.runtime.compiler import run_nvrtc
from warpsmith.agent.runtime.sass import nvdisasm
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.precision_policy import accumulator, allowed_types, narrow_types
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import SpecError

pytestmark = pytest.mark.skipif(nvdisasm() is None, reason="nvdisasm (the nvidia-cuda-nvdisasm wheel) not installed")

# bfloat16 pieces of float32 operands, multiplied on the tensor cores (inline PTX: no header).
BF16_SPLIT = r'''
extern "C" __global__ void k(const float* a, float* c) {
  unsigned x;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(x) : "f"(a[threadIdx.x]), "f"(a[threadIdx.x + 32]));
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, "
               "{%0,%1,%2,%3};" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(x));
  c[threadIdx.x] = d0 + d1 + d2 + d3;
}
'''

# q and k rounded to fp8 before their product, as an attention kernel could.
FP8_ROUNDING = r'''
extern "C" __global__ void k(const float* a, float* c) {
  unsigned short h;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(a[threadIdx.x]), "f"(a[threadIdx.x + 32]));
  unsigned x = h | ((unsigned)h << 16);
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, "
               "{%0,%1,%2,%3};" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(x));
  c[threadIdx.x] = d0 + d1 + d2 + d3;
}
'''

# Plain TF32: float32 operands rounded to TF32 and multiplied once.
TF32 = r'''
extern "C" __global__ void k(const float* a, float* c) {
  unsigned x;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(x) : "f"(a[threadIdx.x]));
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, "
               "{%0,%1,%2,%3};" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(x));
  c[threadIdx.x] = d0 + d1 + d2 + d3;
}
'''


def compiled(source: str, allowed: frozenset[str], nvrtc=run_nvrtc, wide_accumulation: bool = False):
    candidate = Candidate(source, "k", None, name="policy")  # type: ignore[arg-type]  # compiled only, never launched
    return compile_candidate(candidate, "sm_90", False, nvrtc=nvrtc, narrow_allowed=allowed,
                             wide_accumulation=wide_accumulation)


def test_a_float32_kernel_split_into_bfloat16_pieces_is_refused_by_instruction():
    r = compiled(BF16_SPLIT, frozenset())
    assert not r.ok and r.error == "PRECISION_POLICY"
    assert "HMMA.16816.F32.BF16" in r.log and "F2FP.BF16" in r.log and r.log.count("\n") == 0
    assert compiled(BF16_SPLIT, frozenset({"BF16"})).ok  # a bfloat16 workload's own type


def test_rounding_to_fp8_is_refused_in_a_bfloat16_workload():
    r = compiled(FP8_ROUNDING, allowed_types(load_workload(ROOT / "examples" / "attention_bf16")))
    assert not r.ok and r.error == "PRECISION_POLICY"
    assert "F2FP.SATFINITE.E4M3.F32.PACK_AB" in r.log and "E4M3" in r.log.split("compute in ")[1].split(",")[0]


def test_tf32_needs_allow_tf32_or_a_named_split():
    assert compiled(TF32, frozenset()).error == "PRECISION_POLICY"
    sgemm = load_workload(ROOT / "examples" / "sgemm")  # splits = ["3xTF32"]
    assert sgemm.tolerance.splits == ("3xTF32",) and compiled(TF32, allowed_types(sgemm)).ok
    assert "HMMA.1688.F32.TF32" in compiled(TF32, allowed_types(sgemm)).sass_ops


def test_a_kernel_without_tensor_math_passes_an_empty_policy():
    r = compiled('extern "C" __global__ void k(const float* a, float* c) { c[threadIdx.x] = 2.f * a[threadIdx.x]; }',
                 frozenset())
    assert r.ok and r.sass_ops == ()


def test_without_the_machine_code_read_the_policy_fails_closed():
    def without_sass(*args):
        reply = run_nvrtc(*args)
        reply["sass_ops"], reply["sass_error"] = None, "nvdisasm not found"
        return reply
    r = compiled(TF32 + "// not cached\n", frozenset({"TF32"}), nvrtc=without_sass)
    assert not r.ok and r.error == "SASS_UNAVAILABLE" and "nvdisasm not found" in r.log


@pytest.mark.parametrize("op,types,acc", [
    ("HMMA.16816.F32.BF16", {"BF16"}, "F32"), ("HMMA.16816.F32", {"F16"}, "F32"), ("HMMA.16816.F16", {"F16"}, "F16"),
    ("HMMA.1688.F32.TF32", {"TF32"}, "F32"), ("HGMMA.64x256x16.F32.BF16", {"BF16"}, "F32"),
    ("QGMMA.64x128x32.F32.E4M3.E4M3", {"E4M3"}, "F32"), ("F2FP.SATFINITE.E4M3.F32.PACK_AB", {"E4M3"}, ""),
    ("F2FP.BF16.F32.PACK_AB", {"BF16"}, ""), ("F2F.F64.F32", set(), ""), ("F2F.F16.F32", {"F16"}, ""),
    ("QGMMA.64x16x32.F16.E5M2.E4M3", {"F16", "E5M2", "E4M3"}, "F16"), ("F2FP.F16.E4M3.UNPACK_B", {"F16"}, ""),
])
def test_instruction_types_are_read_from_the_opcode(op, types, acc):
    assert narrow_types(op) == types and accumulator(op) == acc


def test_an_unknown_split_is_a_spec_error(tmp_path):
    from workload_factory import make_sgemm_workload
    d = make_sgemm_workload(tmp_path / "w")
    toml = d / "workload.toml"
    toml.write_text(toml.read_text().replace('splits = ["3xTF32"]', 'splits = ["4xFP8"]'))
    with pytest.raises(SpecError, match="4xFP8"):
        load_workload(d)


# -- fp8: what fp8_gemm's policy (E4M3 and BF16, float32 accumulation) lets through ------

# sm_90 has no fp8 mma.sync: the machine code widens the e4m3 fragments to float16 and
# multiplies on the 16-bit tensor cores. ACC is the accumulator type (f32 or f16).
FP8_MMA = r'''
extern "C" __global__ void k(const unsigned* a, float* c) {
  unsigned x = a[threadIdx.x];
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, "
               "{%0,%1,%2,%3};" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(x));
  c[threadIdx.x] = d0 + d1 + d2 + d3;
}
'''

FP8_MMA_F16_ACC = r'''
extern "C" __global__ void k(const unsigned* a, unsigned* c) {
  unsigned x = a[threadIdx.x], h0 = 0, h1 = 0;
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%0,%1}, {%2,%2,%2,%2}, {%2,%2}, {%0,%1};"
               : "+r"(h0), "+r"(h1) : "r"(x));
  c[threadIdx.x] = h0 ^ h1;
}
'''

# fp8 wgmma with an f32 (ACC = f32, 8 registers) or f16 (ACC = f16, 4 registers) accumulator.
FP8_WGMMA = r'''
extern "C" __global__ void k(float* c, unsigned long long da, unsigned long long db) {
  float w[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  asm volatile("wgmma.fence.sync.aligned;");
  asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0; "
               "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1; }"
               : "+f"(w[0]), "+f"(w[1]), "+f"(w[2]), "+f"(w[3]), "+f"(w[4]), "+f"(w[5]), "+f"(w[6]), "+f"(w[7])
               : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned; wgmma.wait_group.sync.aligned 0;");
  for (int i = 0; i < 8; ++i) c[8 * threadIdx.x + i] = w[i];
}
'''

FP8_WGMMA_F16_ACC = r'''
extern "C" __global__ void k(unsigned* c, unsigned long long da, unsigned long long db) {
  unsigned v[4] = {0u, 0u, 0u, 0u};
  asm volatile("wgmma.fence.sync.aligned;");
  asm volatile("{ .reg .pred p; setp.ne.b32 p, 1, 0; "
               "wgmma.mma_async.sync.aligned.m64n16k32.f16.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, p, 1, 1; }"
               : "+r"(v[0]), "+r"(v[1]), "+r"(v[2]), "+r"(v[3]) : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned; wgmma.wait_group.sync.aligned 0;");
  for (int i = 0; i < 4; ++i) c[4 * threadIdx.x + i] = v[i];
}
'''

# float32 values rounded to float16 and multiplied on the tensor cores: float16 that is no
# widening of an fp8 input.
F16_ROUNDING = r'''
extern "C" __global__ void k(const float* a, float* c) {
  unsigned x;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(x) : "f"(a[threadIdx.x]), "f"(a[threadIdx.x + 32]));
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, "
               "{%0,%1,%2,%3};" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(x));
  c[threadIdx.x] = d0 + d1 + d2 + d3;
}
'''


def _fp8_allowed() -> frozenset[str]:
    return allowed_types(load_workload(ROOT / "examples" / "fp8_gemm"))


def test_fp8_mma_sync_widened_to_f16_in_the_machine_code_is_allowed_in_an_fp8_workload():
    """mma.sync e4m3 on sm_90 is F2FP.F16.E4M3.UNPACK_B and HMMA.16816.F32: exact, so fp8_gemm allows it; a
    bfloat16 workload does not (E4M3 is none of its types)."""
    r = compiled(FP8_MMA, _fp8_allowed(), wide_accumulation=True)
    assert r.ok, r.log
    assert {"F2FP.F16.E4M3.UNPACK_B", "HMMA.16816.F32"} <= set(r.sass_ops)
    refused = compiled(FP8_MMA, frozenset({"BF16"}))
    assert refused.error == "PRECISION_POLICY" and "E4M3" in refused.log


def test_fp8_wgmma_is_qgmma_and_an_f32_accumulator_passes():
    """nvdisasm names fp8 wgmma QGMMA with its accumulator type first: F32 is what the policy asks for."""
    r = compiled(FP8_WGMMA, _fp8_allowed(), wide_accumulation=True)
    assert r.ok, r.log
    assert "QGMMA.64x16x32.F32.E4M3.E4M3" in r.sass_ops


@pytest.mark.parametrize("source,op", [(FP8_WGMMA_F16_ACC, "QGMMA.64x16x32.F16.E4M3.E4M3"),
                                       (FP8_MMA_F16_ACC, "HMMA.16816.F16")])
def test_fp8_math_with_an_f16_accumulator_is_refused(source, op):
    """An f16 accumulator under the float32 policy: the PTX audit refuses it first, and the machine code alone
    (what no source spelling hides) names the 16-bit accumulator too."""
    from warpsmith.agent.spec.precision_policy import refusal
    r = compiled(source, _fp8_allowed(), wide_accumulation=True)
    assert not r.ok and r.error == "HALF_ACCUMULATION"
    ops = compiled(source, _fp8_allowed()).sass_ops  # without the float32 policy: compiled, to read its SASS
    assert op in ops
    line = refusal(_fp8_allowed(), ops, wide_accumulation=True)
    assert f"{op} accumulate in 16 bits" in line and "\n" not in line


def test_float16_that_is_no_widening_of_an_fp8_input_is_refused():
    """float32 rounded to float16 (F2FP.F16.F32.PACK_AB, cvt.rn.f16x2.f32) is refused in fp8_gemm although its
    HMMA.16816.F32 would pass: float16 there may only be e4m3 widened."""
    r = compiled(F16_ROUNDING, _fp8_allowed(), wide_accumulation=True)
    assert not r.ok and r.error == "PRECISION_POLICY"
    assert "F2FP.F16.F32.PACK_AB" in r.log and "HMMA" not in r.log.split(" compute in ")[0]
    assert "only as an input widened exactly" in r.log
