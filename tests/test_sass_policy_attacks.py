"""Attacks on the precision policy read from the machine code (agent/runtime/sass.py,
agent/spec/precision_policy.py): kernels that compute in a type narrower than the
workload allows, compiled with real NVRTC for sm_90 and judged by compile_candidate.

Each is a plain test of the refusal; beside the subtler ones, a companion test asserts
that the machine code really holds the narrow math (so a pass is about the policy, not
about a kernel that lost its narrow instructions). Rounding by bit masking, integer
arithmetic no instruction rule sees, is a strict xfail: the tolerance judges it."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_sass_policy import compiled
from workload_factory import ROOT

from warpsmith.agent.runtime import sass
from warpsmith.agent.runtime.sass import SassUnavailable, math_instructions, nvdisasm
from warpsmith.agent.spec.precision_policy import allowed_types
from warpsmith.agent.spec.workload import load_workload

pytestmark = pytest.mark.skipif(nvdisasm() is None, reason="nvdisasm (the nvidia-cuda-nvdisasm wheel) not installed")

F32 = frozenset()  # a float32 workload without a declared split
BF16 = frozenset({"BF16"})  # a bfloat16 workload


def disassembly(source: str) -> str:
    """The whole SASS of the source's CUBIN (compiled without a policy, so that a refused
    kernel's machine code can be read too)."""
    r = compiled(source, None)
    assert r.ok, r.log
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "k.cubin"
        image.write_bytes(r.cubin)
        return subprocess.run([nvdisasm(), "-c", "-ndf", str(image)], capture_output=True, text=True,
                              check=True).stdout


def mma(shape_types: str, acc: str, a: str) -> str:
    return (f'asm volatile("mma.sync.aligned.{shape_types} {{%0,%1,%2,%3}}, {{%4,%4,%4,%4}}, {{%4,%4}}, '
            f'{{%0,%1,%2,%3}};" : "+{acc}"(d0), "+{acc}"(d1), "+{acc}"(d2), "+{acc}"(d3) : "r"({a}));')


def wgmma(shape_types: str, acc: str, scales: str) -> str:
    return (f'asm volatile("wgmma.fence.sync.aligned;");\n'
            f'  asm volatile("{{ wgmma.mma_async.sync.aligned.{shape_types} {{%0,%1,%2,%3}}, %4, %5, {scales}; }}" '
            f': "+{acc}"(d0), "+{acc}"(d1), "+{acc}"(d2), "+{acc}"(d3) : "l"(da), "l"(db));\n'
            '  asm volatile("wgmma.commit_group.sync.aligned; wgmma.wait_group.sync.aligned 0;");')


# ---------------------------------------------------------------------------------------
# Stopped: narrow tensor-core math however its operands are made, wherever its code lies.

# bfloat16 pieces made by integer truncation (PRMT keeps the high halves): no F2FP at all,
# but the HMMA names its type.
PRMT_BF16_HMMA = r'''
extern "C" __global__ void k(const float* a, float* c) {
  unsigned x = __byte_perm(__float_as_uint(a[threadIdx.x]), __float_as_uint(a[threadIdx.x + 32]), 0x7632);
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  ''' + mma("m16n8k16.row.col.f32.bf16.bf16.f32", "f", "x") + r'''
  c[threadIdx.x] = d0 + d1 + d2 + d3;
}
'''

# The HMMA in a __noinline__ device function, called through a function pointer.
NOINLINE_POINTER_HMMA = r'''
__device__ __noinline__ float piece(unsigned x) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  ''' + mma("m16n8k16.row.col.f32.bf16.bf16.f32", "f", "x") + r'''
  return d0 + d1 + d2 + d3;
}
__device__ float other(unsigned x) { return x * 1.f; }
extern "C" __global__ void k(const float* a, float* c) {
  unsigned x = __byte_perm(__float_as_uint(a[threadIdx.x]), __float_as_uint(a[threadIdx.x + 32]), 0x7632);
  float (*fs[2])(unsigned) = {piece, other};
  float (*volatile f)(unsigned) = fs[x & 1];
  c[threadIdx.x] = f(x);
}
'''

# The WMMA API with __nv_bfloat16 fragments (<mma.h> and <cuda_bf16.h> are allowed headers).
WMMA_BF16 = r'''
#include <mma.h>
#include <cuda_bf16.h>
using namespace nvcuda;
extern "C" __global__ void k(const float* a, float* c) {
  __shared__ __nv_bfloat16 s[256];
  for (int i = threadIdx.x; i < 256; i += 32) s[i] = __float2bfloat16(a[i]);
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.f);
  wmma::load_matrix_sync(fa, s, 16);
  wmma::load_matrix_sync(fb, s, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
'''

# e4m3 bytes built with integer arithmetic (no F2FP), multiplied by wgmma: a bf16 workload.
INT_E4M3_QGMMA = r'''
extern "C" __global__ void k(const float* a, float* c, unsigned long long da, unsigned long long db) {
  __shared__ unsigned s[1024];
  unsigned u = __float_as_uint(a[threadIdx.x]);
  unsigned e = ((u >> 23) & 0xff) - 120u, m = (u >> 20) & 7u;
  s[threadIdx.x] = ((u >> 24) & 0x80u) | (e << 3) | m;
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  ''' + wgmma("m64n8k32.f32.e4m3.e4m3", "f", "1, 1, 1") + r'''
  c[threadIdx.x] = d0 + d1 + d2 + d3;
}
'''

# int4 operands: sm_90 has no int4 MMA, ptxas emulates it with int8 IMMAs.
INT4_MMA = r'''
extern "C" __global__ void k(const float* a, float* c) {
  unsigned x = __float_as_uint(a[threadIdx.x]);
  int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  ''' + mma("m16n8k64.row.col.s32.s4.s4.s32", "r", "x") + r'''
  c[threadIdx.x] = (float)(d0 + d1 + d2 + d3);
}
'''

INT8_WGMMA = r'''
extern "C" __global__ void k(const float* a, float* c, unsigned long long da, unsigned long long db) {
  int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  ''' + wgmma("m64n8k32.s32.u8.s8", "r", "1") + r'''
  c[threadIdx.x] = (float)(d0 + d1 + d2 + d3);
}
'''


@pytest.mark.parametrize("source,allowed,op", [
    (PRMT_BF16_HMMA, F32, "HMMA.16816.F32.BF16"),
    (NOINLINE_POINTER_HMMA, F32, "HMMA.16816.F32.BF16"),
    (WMMA_BF16, F32, "HMMA.16816.F32.BF16"),
    (INT_E4M3_QGMMA, BF16, "QGMMA.64x8x32.F32.E4M3.E4M3"),
    (INT4_MMA, F32, "IMMA.16832.S8.S8"),
    (INT8_WGMMA, F32, "IGMMA.64x8x32.U8.S8"),
], ids=["prmt-bf16-hmma", "noinline-pointer-hmma", "wmma-bf16", "int-e4m3-qgmma", "int4-mma", "int8-wgmma"])
def test_narrow_tensor_core_math_is_refused_however_its_operands_are_made(source, allowed, op):
    r = compiled(source, allowed)
    assert not r.ok and r.error == "PRECISION_POLICY" and op in r.log


CONVERT = r'''
extern "C" __global__ void k(const float* a, float* c) {
  OUT y;
  IN x = (IN)a[threadIdx.x];
  asm volatile("INSTRUCTION" : "=O"(y) : "I"(x));
  c[threadIdx.x] = (float)y;
}
'''
_REG = {"f": "float", "d": "double", "r": "unsigned", "h": "unsigned short"}


def convert(instruction: str, out: str, inp: str) -> str:
    return (CONVERT.replace("INSTRUCTION", instruction).replace("OUT", _REG[out]).replace("IN", _REG[inp])
            .replace('"=O"', f'"={out}"').replace('"I"', f'"{inp}"'))


@pytest.mark.parametrize("instruction,out,inp,allowed,op", [
    ("cvt.rn.relu.bf16x2.f32 %0, %1, %1;", "r", "f", F32, "F2FP.RELU.BF16.F32.PACK_AB"),
    ("cvt.rz.satfinite.relu.f16x2.f32 %0, %1, %1;", "r", "f", F32, "F2FP.SATFINITE.RELU.F16.F32.PACK_AB.RZ"),
    ("cvt.rn.relu.f16.f32 %0, %1;", "h", "f", F32, "F2FP.RELU.F16.F32.MERGE_C"),
    ("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %1;", "h", "f", BF16, "F2FP.SATFINITE.E5M2.F32.PACK_AB_MERGE_C"),
    ("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;", "h", "r", BF16, "F2FP.SATFINITE.E4M3.F16.UNPACK_B_MERGE_C"),
    ("cvt.rn.f16x2.e4m3x2 %0, %1;", "r", "h", BF16, "F2FP.F16.E4M3.UNPACK_B"),
    ("cvt.rn.f16.f64 %0, %1;", "h", "d", F32, "F2F.F16.F64"),
    ("cvt.rn.bf16.f16 %0, %1;", "h", "h", F32, "F2F.BF16.F16"),
    ("cvt.rn.f16.bf16 %0, %1;", "h", "h", BF16, "F2F.F16.BF16"),
    ("cvt.rn.tf32.f32 %0, %1;", "r", "f", F32, "F2FP.TF32.F32.PACK_B"),
])
def test_float_narrowing_conversions_are_refused_in_every_spelling(instruction, out, inp, allowed, op):
    r = compiled(convert(instruction, out, inp), allowed)
    assert not r.ok and r.error == "PRECISION_POLICY" and op in r.log


def test_no_other_way_in_dynamic_parallelism_does_not_compile():
    # A child launch needs -rdc and the device runtime, which the options policy never gives.
    r = compiled('__global__ void child(float* c) { c[threadIdx.x] = 1.f; }\n'
                 'extern "C" __global__ void k(const float* a, float* c) { child<<<1, 32>>>(c); }', F32)
    assert not r.ok and r.error.startswith("NVRTC_ERROR")


def test_every_instruction_line_is_parsed_whatever_its_predicate():
    # @P0, @!P0, @!PT, @UP0, @!UPT: the regex of sass.py reads every line that has an address.
    for source in (NOINLINE_POINTER_HMMA, INT_E4M3_QGMMA, WMMA_BF16, BF16_ALU):
        text = disassembly(source)
        lines = [line for line in text.splitlines() if re.match(r"^\s*/\*[0-9a-f]+\*/", line)]
        assert lines and len(sass._INSTRUCTION.findall(text)) == len(lines)


def test_an_unreadable_image_or_a_slow_nvdisasm_fails_closed(monkeypatch):
    with pytest.raises(SassUnavailable, match="failed on the CUBIN"):
        math_instructions(b"\x7fELF not a cubin")
    cubin = compiled(PRMT_BF16_HMMA, None).cubin
    monkeypatch.setattr(sass, "TIMEOUT_S", 1e-6)
    with pytest.raises(SassUnavailable, match="TimeoutExpired"):
        math_instructions(cubin)


# ---------------------------------------------------------------------------------------
# Narrow math off the obvious paths. Each kernel's machine code really holds it
# (test_the_holes_really_compute_narrow), and the policy refuses it.

# 1-bit tensor-core math (AND + POPC), the warp form: its opcode names no type
# (BMMA.168256.AND.POPC), so it is taken at B1. Bit planes of quantised operands make
# integer products of any width from it.
B1_MMA = r'''
extern "C" __global__ void k(const float* a, float* c) {
  unsigned x = __float_as_uint(a[threadIdx.x]);
  int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  ''' + mma("m16n8k256.row.col.s32.b1.b1.s32.and.popc", "r", "x") + r'''
  c[threadIdx.x] = (float)(d0 + d1 + d2 + d3);
}
'''

# The same in the warpgroup form: BGMMA.64x8x256.AND.POPC (sm_90a).
B1_WGMMA = r'''
extern "C" __global__ void k(const float* a, float* c, unsigned long long da, unsigned long long db) {
  int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  ''' + wgmma("m64n8k256.s32.b1.b1.and.popc", "r", "1") + r'''
  c[threadIdx.x] = (float)(d0 + d1 + d2 + d3);
}
'''

# bfloat16 pieces by integer truncation (PRMT), multiplied in bf16x2 on the ALUs
# (HMUL2.BF16_V2, HFMA2.MMA.BF16_V2: twice the FP32 rate on an H100), summed in float32.
# No F2FP, no tensor core: the PTX's mul.bf16x2 and fma.bf16x2 are the narrow math.
BF16_ALU = r'''
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {
  int i = threadIdx.x;
  float acc = 0.f;
  for (int j = 0; j < n; j += 2) {
    unsigned x = __byte_perm(__float_as_uint(a[i * n + j]), __float_as_uint(a[i * n + j + 1]), 0x7632);
    unsigned y = __byte_perm(__float_as_uint(b[j * 32 + i]), __float_as_uint(b[(j + 1) * 32 + i]), 0x7632);
    unsigned p;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(p) : "r"(x), "r"(y));
    acc += __uint_as_float(p << 16) + __uint_as_float(p & 0xffff0000u);
  }
  c[i] = acc;
}
'''

# float32 operands rounded to f16 through an integer (F2I, then I2F.F16), multiplied and
# summed in f16x2 on the ALUs (HFMA2): a 16-bit running sum in a float32 workload, where the
# accumulation rule does not apply (no 16-bit array) but the narrow-type rule does.
F16_ALU_VIA_I2F = r'''
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {
  int i = threadIdx.x;
  unsigned acc = 0;
  for (int j = 0; j < n; ++j) {
    unsigned short x, y;
    asm("cvt.rn.f16.s32 %0, %1;" : "=h"(x) : "r"(__float2int_rn(a[i * n + j] * 1024.f)));
    asm("cvt.rn.f16.s32 %0, %1;" : "=h"(y) : "r"(__float2int_rn(b[j * 32 + i] * 1024.f)));
    unsigned xy = x | ((unsigned)y << 16);
    asm("fma.rn.f16x2 %0, %1, %1, %0;" : "+r"(acc) : "r"(xy));
  }
  unsigned short lo = acc & 0xffff;
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(lo));
  c[i] = f / (1024.f * 1024.f);
}
'''

# int8 quantisation (F2I.S8) and int8 dot products on the ALUs (IDP.4A).
INT8_DP4A = r'''
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {
  int i = threadIdx.x, acc = 0;
  for (int j = 0; j < n; j += 4) {
    int qa = 0, qb = 0;
    for (int t = 0; t < 4; ++t) {
      int x, y;
      asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(x) : "f"(a[i * n + j + t] * 127.f));
      asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(y) : "f"(b[(j + t) * 32 + i] * 127.f));
      qa |= (x & 0xff) << (8 * t);
      qb |= (y & 0xff) << (8 * t);
    }
    acc = __dp4a(qa, qb, acc);
  }
  c[i] = acc / (127.f * 127.f);
}
'''

# A conversion to bfloat16 from an integer: I2F.BF16 (and I2F.F16, I2F.F16.U16, I2F.F16.S64).
I2F_BF16 = convert("cvt.rn.bf16.s32 %0, %1;", "h", "r")

# TF32 rounding as CUDA spells it (wmma::__float_to_tf32 is cvt.rna.tf32.f32): ptxas lowers
# it to integer arithmetic (LOP3), no F2FP. Only the PTX shows it.
TF32_RNA = convert("cvt.rna.tf32.f32 %0, %1;", "r", "f")

# Rounding by bit masking (bfloat16 truncation): integer arithmetic, invisible to any
# instruction-level rule. Known gap; the float32 tolerance refuses its results by far
# (max error 6e-3..8e-3 against rtol 4e-6..2e-4, GEMM K = 61..131072).
MASK_BF16 = r'''
extern "C" __global__ void k(const float* a, const float* b, float* c, int n) {
  float acc = 0.f;
  for (int j = 0; j < n; ++j)
    acc += __uint_as_float(__float_as_uint(a[threadIdx.x * n + j]) & 0xffff0000u) *
           __uint_as_float(__float_as_uint(b[j * 32 + threadIdx.x]) & 0xffff0000u);
  c[threadIdx.x] = acc;
}
'''

HOLES = {
    "b1-mma (BMMA)": (B1_MMA, F32, r"\bBMMA\.168256\.AND\.POPC\b"),
    "b1-wgmma (BGMMA)": (B1_WGMMA, F32, r"\bBGMMA\.64x8x256\.AND\.POPC\b"),
    "bf16x2-alu (HMUL2.BF16_V2)": (BF16_ALU, F32, r"\bHMUL2\.BF16_V2 R\d+, R\d+, R\d+"),
    "f16x2-alu-via-i2f (HFMA2, I2F.F16)": (F16_ALU_VIA_I2F, F32, r"\bI2F\.F16\b(?s:.*)\bHFMA2 R\d+, R\d+, R\d+, R\d+"),
    "int8-dp4a (F2I.S8, IDP.4A)": (INT8_DP4A, F32, r"\bF2I\.S8\.NTZ\b(?s:.*)\bIDP\.4A\.S8\.S8\b"),
    "i2f-bf16 (I2F.BF16)": (I2F_BF16, F32, r"\bI2F\.BF16\b"),
    "tf32-rna (LOP3)": (TF32_RNA, F32, r"\bLOP3\.LUT R\d+, R\d+, 0xffffe000"),
    "mask-bf16 (LOP3)": (MASK_BF16, F32, r"\bLOP3\.LUT R\d+, R\d+, 0xffff0000"),
}


@pytest.mark.parametrize("name", HOLES)
def test_the_holes_really_compute_narrow(name):
    source, _, pattern = HOLES[name]
    assert re.search(pattern, disassembly(source)), name


@pytest.mark.parametrize("name", [
    "b1-mma (BMMA)",  # an opcode naming no type is taken at the narrowest it can mean (B1)
    "b1-wgmma (BGMMA)",
    "bf16x2-alu (HMUL2.BF16_V2)",  # 16-bit ALU math: the PTX's narrow arithmetic
    "f16x2-alu-via-i2f (HFMA2, I2F.F16)",  # I2F read; the PTX's fma.f16x2
    "int8-dp4a (F2I.S8, IDP.4A)",  # F2I and IDP read; the PTX's cvt to s8 and dp4a
    "i2f-bf16 (I2F.BF16)",
    "tf32-rna (LOP3)",  # ptxas lowers the TF32 rounding to integer LOP3: the PTX's cvt.rna.tf32.f32
    pytest.param("mask-bf16 (LOP3)", marks=pytest.mark.xfail(strict=True, reason=(
        "known gap: rounding by bit masking is integer arithmetic; the float32 tolerance catches its "
        "results instead"))),
])
def test_the_holes_should_be_refused(name):
    source, allowed, _ = HOLES[name]
    r = compiled(source, allowed)
    assert not r.ok and r.error == "PRECISION_POLICY"


def test_the_bfloat16_workload_used_above_allows_bf16_only():
    assert allowed_types(load_workload(ROOT / "examples" / "attention_bf16")) == BF16


# ---------------------------------------------------------------------------------------
# Stopped: a 16-bit running sum kept in memory by reductions, which add in their type. The
# operands are made by integer truncation (no conversion to see); the adds are the memory's.

def _reduction(statement: str, setup: str = "") -> str:
    return ('#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n'
            'extern "C" __global__ void k(const float* a, unsigned* c, int n) {\n'
            f'  {setup}\n'
            '  for (int i = 0; i < n; ++i) {\n'
            '    const unsigned h = __byte_perm(__float_as_uint(a[i]), __float_as_uint(a[i + n]), 0x7632);\n'
            f'    {statement}\n'
            '  }\n}\n')


REDUCTIONS = {
    "red.global.add.noftz.bf16x2": _reduction('asm volatile("red.global.add.noftz.bf16x2 [%0], %1;" '
                                              ':: "l"(c + threadIdx.x), "r"(h));'),
    "atom.global.add.noftz.bf16": _reduction('unsigned short r; asm volatile("atom.global.add.noftz.bf16 %0, [%1], %2;" '
                                             ': "=h"(r) : "l"(c + threadIdx.x), "h"((unsigned short)h));'),
    "atom.shared.add.noftz.f16x2": _reduction(
        'unsigned r; asm volatile("atom.shared.add.noftz.f16x2 %0, [%1], %2;" : "=r"(r) '
        ': "r"((unsigned)__cvta_generic_to_shared(s + threadIdx.x)), "r"(h)); c[threadIdx.x] = s[threadIdx.x];',
        "__shared__ unsigned s[32];"),
    "atomicAdd on __half": _reduction('atomicAdd(reinterpret_cast<__half*>(c) + threadIdx.x, '
                                      '__ushort_as_half((unsigned short)h));'),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_a_sixteen_bit_sum_kept_by_memory_reductions_is_refused(name):
    r = compiled(REDUCTIONS[name], F32)
    assert not r.ok and r.error == "PRECISION_POLICY", (r.error, r.log)
    assert compiled(REDUCTIONS[name], frozenset({"BF16", "F16"})).ok  # where the workload's type is 16-bit


def test_a_reduction_in_memory_is_read_from_the_machine_code_too():
    """REDG.E.ADD.BF16x2.RN names its type with the lane count: the classifier reads BF16."""
    from warpsmith.agent.spec.precision_policy import narrow_types
    assert narrow_types("REDG.E.ADD.BF16x2.RN.STRONG.GPU") == {"BF16"}
    assert narrow_types("UBLKRED.G.S.ADD.BF16.RN") == {"BF16"}
    assert narrow_types("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU") == frozenset()
    assert any(op.startswith("REDG") and "BF16" in op
               for op in sass.math_in(disassembly(REDUCTIONS["red.global.add.noftz.bf16x2"])))
