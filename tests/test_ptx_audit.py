"""The PTX audit (agent/runtime/ptx_audit.py) against the ways a kernel can accumulate in
16 bits or reach memory it must not, and honest controls: every source is
compiled by the real pipeline (NVRTC in the compile process), and the instructions it
names must be there exactly when the kernel accumulates in 16 bits."""

from __future__ import annotations

from pathlib import Path

import pytest

from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.runtime.ptx_audit import constant_writes, half_accumulation

HDR = '#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include <mma.h>\n'


def A(asm, T="unsigned short", cons="h"):
    return HDR + f'''extern "C" __global__ void k(const {T}* x, {T}* y, int n){{
  {T} s = x[0];
  for (int i=1;i<n;i++) {{ {T} v = x[i]; asm volatile("{asm}" : "+{cons}"(s) : "{cons}"(v)); }}
  y[0]=s;
}}'''


MMA = HDR + r'''
extern "C" __global__ void k(const unsigned* a, const unsigned* b, unsigned* c, int K){
  unsigned d0=0,d1=0; unsigned e=0;
  for (int k0=0;k0<K;k0++){
    asm volatile("%s" : "+r"(d0), "+r"(d1) : "r"(a[4*k0]),"r"(a[4*k0+1]),"r"(a[4*k0+2]),"r"(a[4*k0+3]),"r"(b[2*k0]),"r"(b[2*k0+1]), "r"(e));
  }
  c[0]=d0; c[1]=d1;
}'''


def mma(s): return MMA.replace("%s", s)


def RED(s):
    return HDR + r'''extern "C" __global__ void k(unsigned* o, const unsigned* x){ unsigned a=x[threadIdx.x], b=x[threadIdx.x+1];
 asm volatile("%s" :: "l"(o), "r"(a), "r"(b) : "memory"); }'''.replace("%s", s)


W = r'''
extern "C" __global__ void k(unsigned* c, unsigned long long da, unsigned long long db, int K){
  unsigned d0=0,d1=0;
  for (int k0=0;k0<K;k0++){
    asm volatile("wgmma.fence.sync.aligned;");
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %4, 0; %s }" : "+r"(d0), "+r"(d1) : "l"(da), "l"(db), "r"(k0));
    asm volatile("wgmma.commit_group.sync.aligned; wgmma.wait_group.sync.aligned 0;");
  }
  c[0]=d0; c[1]=d1;
}'''


def w(s): return W.replace("%s", s)
ops = "{%0,%1}, %2, %3, p, 1, 1, 0, 0;"
WMMA_H = HDR + r'''
using namespace nvcuda;
extern "C" __global__ void k(const __half* a, const __half* b, __half* c, int K){
  wmma::fragment<wmma::matrix_a,16,16,16,__half,wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b,16,16,16,__half,wmma::col_major> fb;
  wmma::fragment<wmma::accumulator,16,16,16,__half> acc;
  wmma::fill_fragment(acc, __float2half(0.f));
  for (int k0=0;k0<K;k0+=16){ wmma::load_matrix_sync(fa,a+k0,K); wmma::load_matrix_sync(fb,b+k0,K); wmma::mma_sync(acc,fa,fb,acc);}
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}'''
WMMA_F = WMMA_H.replace("wmma::accumulator,16,16,16,__half>", "wmma::accumulator,16,16,16,float>").replace("__float2half(0.f)","0.f").replace("__half* c","float* c")
WMMA_BF = WMMA_F.replace("__half", "__nv_bfloat16")
CPRED = HDR + r'''
extern "C" __global__ void k(__nv_bfloat16* out, const __nv_bfloat16* x, int n){
  __shared__ alignas(128) __nv_bfloat16 buf[64];
  for (int i=0;i<n;i++){
    buf[threadIdx.x] = x[i*64+threadIdx.x];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x==0){
      asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], 128;" :: "l"(out), "r"((unsigned)__cvta_generic_to_shared(buf)) : "memory");
      asm volatile("cp.async.bulk.commit_group; cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
    __syncthreads();
  }
}'''
CPRED_F32 = CPRED.replace("__nv_bfloat16* out", "float* out").replace(".add.noftz.bf16", ".add.f32")
# (name, source, should_flag)
ATTACKS = [
 ("asm plain", A("add.rn.bf16 %0, %0, %1;"), True),
 ("asm 'add .rn.bf16'", A("add .rn.bf16 %0, %0, %1;"), True),
 ("asm 'add\\t.bf16'", A("add\\t.bf16 %0, %0, %1;"), True),
 ("asm 'add\\n.bf16'", A("add\\n.bf16 %0, %0, %1;"), True),
 ("asm 'add.rn .bf16'", A("add.rn .bf16 %0, %0, %1;"), True),
 ("asm 'add/**/.bf16'", A("add/**/.bf16 %0, %0, %1;"), True),
 ("asm '@ p add'", A("{ .reg .pred p; setp.eq.u32 p, 1, 1; @ p add.bf16 %0, %0, %1; }"), True),
 ("asm '@ ! p add'", A("{ .reg .pred p; setp.eq.u32 p, 1, 0; @ ! p add.bf16 %0, %0, %1; }"), True),
 ("asm '// /*' ... '// */'", A("// /*\\n add.bf16 %0, %0, %1;\\n// */"), True),
 ("asm 'add.bf16.rn'", A("add.bf16.rn %0, %0, %1;"), True),
 ("asm 'add.f16.sat'", A("add.f16.sat %0, %0, %1;"), True),
 ("asm 'fma.bf16.rn'", A("fma.bf16.rn %0, %0, %1, %0;"), True),
 ("asm 'fma.rn.oob.relu.bf16'", A("fma.rn.oob.relu.bf16 %0, %0, %1, %0;"), True),
 ("atom type-first", RED("{.reg .b16 h; mov.b32 {h,_}, %1; atom.global.bf16.add.noftz h, [%0], h;}"), True),
 ("red v2 first", RED("red.global.v2.bf16x2.add.noftz [%0], {%1,%2};"), True),
 ("red L2::cache_hint", RED("{.reg .b64 pol; createpolicy.fractional.L2::evict_last.b64 pol, 1.0; red.global.add.noftz.L2::cache_hint.bf16x2 [%0], %1, pol;}"), True),
 ("red space", RED("red.global.add.noftz .bf16x2 [%0], %1;"), True),
 ("mma.sync f16", mma("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"), True),
 ("mma layouts first", mma("mma.sync.aligned.row.col.m16n8k16.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"), True),
 ("mma aligned.sync", mma("mma.aligned.sync.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"), True),
 ("mma space", mma("mma .sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"), True),
 ("mma.sp f16", mma("mma.sp.sync.aligned.m16n8k32.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7,%6,%7}, {%0,%1}, %8, 0x0;"), True),
 ("mma.sp::ordered_metadata f16", mma("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7,%6,%7}, {%0,%1}, %8, 0x0;"), True),
 ("mma fp8 f16acc", mma("mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"), True),
 ("wmma asm f16", mma("{.reg .b32 t<8>; wmma.mma.sync.aligned.row.col.m16n16k16.f16.f16 {%0,%1,t2,t3}, {%2,%3,%4,%5,%2,%3,%4,%5}, {%6,%7,%6,%7,%6,%7,%6,%7}, {%0,%1,%0,%1};}"), True),
 ("wmma API half accumulator", WMMA_H, True),
 ("wgmma f16", w("wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 " + ops), True),
 ("wgmma aligned.sync", w("wgmma.mma_async.aligned.sync.m64n8k16.f16.f16.f16 " + ops), True),
 ("wgmma space", w("wgmma.mma_async .sync.aligned.m64n8k16.f16.f16.f16 " + ops), True),
 ("wgmma types first", w("wgmma.mma_async.sync.aligned.f16.f16.f16.m64n8k16 " + ops), True),
 ("cp.reduce.async.bulk add bf16", CPRED, True),
 ("asm add between pragma strings spanning lines", A('.pragma \\"a\\nb\\"; add.bf16 %0, %0, %1; .pragma \\"c\\";'), True),
 ("asm add between pragma strings ending in a backslash", A('.pragma \\"nounroll\\\\\\"; add.bf16 %0, %0, %1; .pragma \\"nounroll\\";'), True),
 ("honest mma f32", mma("{.reg .f32 f<4>; mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {f0,f1,f2,f3}, {%2,%3,%4,%5}, {%6,%7}, {f0,f1,f2,f3};}"), False),
 ("honest mma f16in f32acc", mma("{.reg .f32 f<4>; mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {f0,f1,f2,f3}, {%2,%3,%4,%5}, {%6,%7}, {f0,f1,f2,f3};}"), False),
 ("honest wgmma f32", w("{.reg .f32 f<4>; wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {f0,f1,f2,f3}, %2, %3, p, 1, 1, 0, 0;}"), False),
 ("honest wgmma f16in f32", w("{.reg .f32 f<4>; wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {f0,f1,f2,f3}, %2, %3, p, 1, 1, 0, 0;}"), False),
 ("honest wmma f32 acc", WMMA_F, False),
 ("honest wmma bf16 f32 acc", WMMA_BF, False),
 ("honest cp.reduce f32", CPRED_F32, False),
 ("honest mul/neg/max", A("{.reg .b16 t; mul.rn.bf16 t, %0, %1; neg.bf16 t, t; max.bf16 %0, t, %1;}"), False),
]



@pytest.mark.parametrize("name,source,accumulates", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_audit_names_16_bit_accumulation_and_only_that(name, source, accumulates):
    r = compile_kernel(source, "k", "sm_90", [], use_cache=False)
    assert r.ok, r.log[-400:]
    assert bool(r.half_ops) == accumulates, r.half_ops


def test_sm80s_bf16_multiply_is_an_fma_with_a_constant_addend_and_passes():
    """sm_80 lowers a bf16 __hmul to fma.rn.bf16 d, a, b, c with c = -0 (a mov of 0x8000):
    a multiply, allowed; the same fma with a running sum as its addend is refused."""
    mul = HDR + '''extern "C" __global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y) {
  y[threadIdx.x] = __hmul(x[threadIdx.x], x[threadIdx.x + 1]); }'''
    acc = HDR + '''extern "C" __global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y, int n) {
  __nv_bfloat16 s = x[0]; for (int i = 1; i < n; i++) s = __hfma(x[i], x[i], s); y[0] = s; }'''
    for arch in ("sm_80", "sm_90"):
        assert compile_kernel(mul, "k", arch, [], use_cache=False).half_ops == ()
        assert compile_kernel(acc, "k", arch, [], use_cache=False).half_ops


def test_the_audit_reads_ptx_as_ptxas_does():
    """Blanks and comments between an opcode and its modifiers, modifiers in any order,
    a block comment opened inside a line comment, guards with blanks, labels and braces."""
    ptx = """
        add.f32 %f1, %f2, %f3;  // add.rn.bf16 in a comment
        // /*
        add .bf16.rn %rs1, %rs1, %rs2;
        // */
        { .reg .b16 t; L1: @ ! %p1 fma/**/.rn .f16x2 %r1, %r2, %r3, %r1; }
        mul.rn.bf16 %rs1, %rs2, %rs3; cvt.rn.bf16.f32 %rs1, %f1; max.bf16 %rs1, %rs1, %rs2;
        mov.b16 %rs9, 0x8000;
        fma.rn.bf16 %rs4, %rs1, %rs2, %rs9;
        fma.rn.bf16 %rs5, %rs1, %rs2, 0x0000;
        mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1}, {%r1}, {%r2}, {%f1};
        wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, p, 1, 1, 0, 1;
    """
    assert half_accumulation(ptx) == ("add.bf16.rn", "fma.rn.f16x2")
    assert half_accumulation("mov.b16 %rs1, 0x0000;\nfma.rn.bf16 %rs1, %rs2, %rs3, %rs1;") == ("fma.rn.bf16",)


def test_ptx_that_is_not_utf8_still_compiles():
    """Inline assembly may carry any byte into the PTX: the compile process decodes it
    leniently instead of crashing (the audit reads instruction names only)."""
    r = compile_kernel('extern "C" __global__ void k() { asm volatile("// \\xff"); }', "k", "sm_90", [],
                       use_cache=False)
    assert r.ok and r.half_ops == (), (r.error, r.log[-300:])


def test_a_compile_that_returns_no_ptx_is_refused_where_the_policy_needs_it():
    """Fail closed: a reply without the audit (an older worker, NVRTC giving no PTX) cannot
    be trusted; a workload whose policy is float32 refuses the kernel, another takes it."""
    from warpsmith.agent.evaluate.compile_audit import compile_candidate
    from warpsmith.agent.runtime.compiler import run_nvrtc
    from warpsmith.agent.spec.candidate import Candidate

    def without_ptx(*args):
        reply = run_nvrtc(*args)
        reply.pop("half_ops", None)
        return reply
    source = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.f; }'
    candidate = Candidate(source, "k", None, name="no-ptx")  # type: ignore[arg-type]  # compiled only, never launched
    refused = compile_candidate(candidate, "sm_90", False, nvrtc=without_ptx, wide_accumulation=True)
    assert not refused.ok and refused.error == "PTX_UNAVAILABLE"
    assert compile_candidate(candidate, "sm_90", False, nvrtc=without_ptx).ok


def test_a_change_to_the_audit_does_not_read_cache_entries_made_before_it(monkeypatch):
    """The cache keeps the audit's verdict beside the CUBIN: an entry made before the audit learnt to see
    an instruction must not pass a kernel with it (the key holds ptx_audit.VERSION)."""
    from warpsmith.agent.runtime import compiler, ptx_audit
    key = compiler._cache_key("src", "k", [], "sm_90", (13, 0))
    monkeypatch.setattr(ptx_audit, "VERSION", ptx_audit.VERSION + 1)
    assert compiler._cache_key("src", "k", [], "sm_90", (13, 0)) != key


STASH = r'''__constant__ float stash[1024];
extern "C" __global__ void k(const float* a, float* y) {
  float* p;
  %s
  if (a[0] == p[0]) { y[threadIdx.x] = p[threadIdx.x + 1]; return; }  // the same input again: replay
  y[threadIdx.x] = a[threadIdx.x] * 2.f;
  p[threadIdx.x + 1] = y[threadIdx.x]; p[0] = a[0];
}'''


@pytest.mark.parametrize("how", [
    'asm volatile("mov.b64 %0, %1;" : "=l"(p) : "l"(stash));',  # the address laundered through asm
    'asm volatile("cvta.const.u64 %0, stash;" : "=l"(p));',
])
def test_a_writable_address_of_constant_memory_is_state_and_refused(how):
    """A __constant__ array written through a generic pointer keeps an output across launches. The compile
    process refuses the PTX that makes such a pointer, for every caller (KERNEL_KEEPS_STATE), and the kernel never runs. (Plain C++,
    `p = stash`, compiles to a trap with NVVM's "Cannot store to pointer that points to constant memory";
    ptxas rejects `generic(stash)` of a .const variable.)"""
    r = compile_kernel(STASH % how, "k", "sm_90", [], use_cache=False)
    assert not r.ok and r.error == "KERNEL_KEEPS_STATE" and "__constant__" in r.log and "\n" not in r.log


def test_the_constant_write_audit_reads_every_generic_and_cvta_const():
    """Any generic(): the constant may be declared as the second name of a list (`.const .b32 a, cvar[4];
    .const .u64 cp = generic(cvar);`) or with a `%` name; reading constant memory stays allowed."""
    reads = ".const .align 4 .b8 stash[4096];\n ld.const.f32 %f1, [stash+4]; cvta.to.const.u64 %rd3, %rd4;"
    assert constant_writes(reads) == ()
    assert constant_writes(".const .b32 cdummy, cvar[4];\n.const .u64 cp = generic(cvar);") == ("generic()",)
    assert constant_writes(".const .u64 t[2] = {generic(a), generic(b)};") == ("generic()",)
    assert constant_writes(".visible .entry generic(.param .u64 p) { ret; }") == ()
    assert constant_writes(".const .b32 %cvar[4];\n.const .u64 cp = generic ( %cvar );") == ("generic()",)
    assert constant_writes(reads + " cvta .const .u64 %rd5, stash;") == ("cvta.const.u64",)
    assert constant_writes('.pragma "a\nb"; cvta.const.u64 %rd5, stash; .pragma "c";') == ("cvta.const.u64",)


def test_a_kernel_named_generic_is_only_a_name():
    r = compile_kernel('extern "C" __global__ void generic(float* y) { y[threadIdx.x] = 1.f; }', "generic", "sm_90", [],
                       use_cache=False)
    assert r.ok, r.log


def test_reading_constant_memory_stays_allowed():
    table = r'''__constant__ float table[256];
extern "C" __global__ void k(const int* i, float* y) { y[threadIdx.x] = table[i[threadIdx.x] & 255] + table[3]; }'''
    r = compile_kernel(table, "k", "sm_90", [], use_cache=False)
    assert r.ok, r.log


# A kernel's parameters sit in a ring of launch slots in device memory; on an H100, through its parameters'
# address a kernel read the arguments of launches before and after it (the checks' keys) and rewrote a later
# one's.
PARAM_GENERIC = r'''
struct Args { unsigned long long* out; long long first; };
extern "C" __global__ void k(const __grid_constant__ Args a) {
  unsigned long long p;
  asm volatile("mov.b64 %0, %1;" : "=l"(p) : "l"(&a));
  a.out[threadIdx.x] = reinterpret_cast<volatile unsigned long long*>(p)[a.first + threadIdx.x];
}'''
PARAM_BELOW = r'''
struct Args { unsigned long long* out; long long words; };
extern "C" __global__ void k(const __grid_constant__ Args a) {
  const unsigned long long* base = reinterpret_cast<const unsigned long long*>(&a);
  a.out[threadIdx.x] = base[(long long)threadIdx.x - a.words];  // the driver's words below the parameters
}'''
PARAM_INDEXED = r'''
struct Table { float w[16]; };
extern "C" __global__ void k(const __grid_constant__ Table t, const int* i, float* y) {
  y[threadIdx.x] = t.w[i[threadIdx.x]];  // an index the compiler cannot see: a load through the parameters' address
}'''


@pytest.mark.parametrize("source", [PARAM_GENERIC, PARAM_BELOW, PARAM_INDEXED])
def test_a_parameters_address_put_to_any_use_but_a_tma_descriptor_is_refused(source):
    r = compile_kernel(source, "k", "sm_90", [], use_cache=False)
    assert not r.ok and r.error == "PARAMETER_ADDRESS" and "TMA descriptor" in r.log and "\n" not in r.log, r.log


def test_the_parameter_audit_reads_the_ptx_forms():
    from warpsmith.agent.runtime.ptx_parameters import parameter_reach
    head = ".visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .align 64 .b8 k_param_1[128]\n)\n{\n\t.reg .b64 %rd<9>;\n"
    ok = head + "\tld.param.u64 %rd1, [k_param_0];\n\tld.param.u64 %rd2, [k_param_1+120];\n\tmov.b64 %rd3, k_param_1;\n" \
        "\tcvta.param.u64 %rd4, %rd3;\n\tmov.b64 %rd5, %rd4;\n" \
        "\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd5, {%r2, %r3}], [%r4];\n" \
        "\tprefetch.tensormap [%rd4];\n\tret;\n}\n"
    assert parameter_reach(ok) == ()
    outside = ("ld.param.u64 at an address other than a parameter and a constant inside it",)
    for address in ("[k_param_1+128]", "[k_param_1+-8]", "[k_param_1+-8+0]", "[k_param_1+(-8)]", "[k_param_1+~7]",
                    "[k_param_1+8*-1]", "[%rd9]", "[%rd9+8]"):
        assert parameter_reach(ok.replace("[k_param_1+120]", address)) == outside, address
    assert parameter_reach(ok.replace("\tret;", "\tadd.s64 %rd6, %rd5, -4096;\n\tret;")) == \
        ("add.s64 of a parameter's address",)
    assert parameter_reach(ok.replace("\tret;", "\tld.u64 %rd6, [%rd4+8];\n\tret;")) == ("ld.u64 of a parameter's address",)
    assert parameter_reach(ok.replace("{%r2, %r3}], [%r4]", "{%r2, %r3}], [%rd5]")) != ()  # the map, and only the map
    assert parameter_reach(ok.replace("\tret;", "\tmov.u32 %r9, %envreg3;\n\tret;")) == ("%envreg",)
    # A second function's registers are its own: %rd4 there is no parameter's address.
    other = ".visible .entry j(\n\t.param .u64 j_param_0\n)\n{\n\tld.param.u64 %rd4, [j_param_0];\n\tld.u64 %rd5, [%rd4];\n\tret;\n}\n"
    assert parameter_reach(ok + other) == ()


@pytest.mark.parametrize("workload", ["sgemm", "softmax", "layernorm", "rowsum", "transpose", "gemm_bias_relu",
                                      "bf16_gemm", "rmsnorm_bf16", "attention_bf16", "fp8_gemm"])
def test_every_shipped_kernel_passes_the_parameter_audit(workload):
    """No false refusal: every kernel of the examples at its default knobs and every configuration it lists,
    the TMA kernels (a `const __grid_constant__ CUtensorMap` whose address is the descriptor) among them, passes
    the parameter audits (the PTX's and the machine code's), the state audit and its workload's precision policy
    read from the machine code."""
    from warpsmith.agent.evaluate.compile_audit import compile_candidate
    from warpsmith.agent.spec.candidate import Candidate
    from warpsmith.agent.spec.precision_policy import allowed_types
    from warpsmith.agent.spec.workload import load_workload
    w = load_workload(Path(__file__).resolve().parent.parent / "examples" / workload)
    for k in w.kernels.values():
        for defines in [{}, *k.configs]:
            c = compile_candidate(Candidate.from_spec(k, defines), "sm_90", False, wide_accumulation=w.wide_accumulation,
                                  narrow_allowed=allowed_types(w))
            assert c.ok, (k.name, defines, c.error, c.log[-400:])



# Other spellings of a pointer to the parameters or to the driver's words below them: a list of forbidden
# forms misses some, so the audit reads fail-closed and refuses each.
PARAMETER_ADDRESS_FORMS = {
    "guard without %": 'asm volatile("{ .reg .pred p; setp.eq.u32 p, 1, 1;\\n@p mov.b64 %0, k_param_0;\\n'
                       '@p cvta.param.u64 %0, %0; }" : "=l"(p));',
    "cvta.param of a number": 'asm volatile("{ .reg .b64 t; mov.b64 t, 0; cvta.param.u64 %0, t; }" : "=l"(p));',
    "ld.param through a register": 'asm volatile("ld.param.u64 %0, [%1];" : "=l"(p) : "l"(a.first));',
    "a .func inside the body": 'asm volatile(".extern .func dummy_split;\\nmov.b64 %0, k_param_0;\\n'
                               'cvta.param.u64 %0, %0;" : "=l"(p));',
    "a body .param widening a parameter": 'asm volatile("ld.param.u64 %0, [k_param_0+4096];\\n'
                                          '{ .param .b8 k_param_0[65536]; }" : "=l"(p));',
}


@pytest.mark.parametrize("how", sorted(PARAMETER_ADDRESS_FORMS))
def test_other_spellings_of_a_parameters_address_are_refused(how):
    source = ("struct Args { unsigned long long* out; long long first; };\n"
              'extern "C" __global__ void k(const __grid_constant__ Args a) {\n  unsigned long long p;\n  '
              + PARAMETER_ADDRESS_FORMS[how] + "\n  a.out[threadIdx.x] = reinterpret_cast<volatile unsigned long long*>(p)"
              "[a.first + threadIdx.x];\n}")
    r = compile_kernel(source, "k", "sm_90", [], use_cache=False)
    assert not r.ok and r.error in ("PARAMETER_ADDRESS", "NVRTC_ERROR_COMPILATION"), (r.error, r.log)
    assert r.error == "PARAMETER_ADDRESS", r.log  # ptxas takes each of them


def test_tma_prefetch_and_the_tensormap_fence_stay_allowed():
    """No false refusal of the other TMA forms CUTLASS uses: a bulk tensor prefetch into L2 and the proxy fence,
    both on the descriptor's generic address."""
    source = r"""
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void k(const __grid_constant__ CUtensorMap map, float* y) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"(reinterpret_cast<unsigned long long>(&map)), "r"(0), "r"(0) : "memory");
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;"
               :: "l"(reinterpret_cast<unsigned long long>(&map)) : "memory");
  y[threadIdx.x] = 1.f;
}"""
    r = compile_kernel(source, "k", "sm_90", [], use_cache=False)
    assert r.ok, (r.error, r.log)


def test_runs_of_blanks_are_collapsed_before_the_dot_rule():
    """A 500-byte source whose macros double a blank to 262 144 of them inside an asm: the normalisation's dot
    rule over such a run was quadratic (150 s). Blanks are collapsed first: the audits read a short listing."""
    from warpsmith.agent.runtime.ptx_audit import audited
    from warpsmith.agent.runtime.ptx_text import normalised
    ptx = ".visible .entry k(.param .u64 k_param_0) { .reg .b64 %rd<3>;" + " " * 20000 + "ld.param.u64 %rd1, " \
          "[k_param_0]; add .rn .bf16 %h1, %h2, %h3; ret; }"
    assert len(normalised(ptx)) < 200
    assert audited(ptx) == (("add.rn.bf16",), (), (), ("add.rn.bf16",))


# Reads the fail-closed reading must still refuse: `.param::entry` spells the state space another way; a
# `.pragma` between an entry's signature and its brace hides the whole body (the entry written in a helper's
# inline assembly); a register named as the first parameter makes `[k_param_0]` a register-indexed read; a
# vector ld.param reads past the last parameter. Each reaches c[0x0][0x198] in its SASS.
ATTACKS = Path(__file__).resolve().parent / "ptx_attacks"
DISGUISED_PARAMETER_READS = {
    "param::entry": 'extern "C" __global__ void k(unsigned long long* out, long long off) {\n  unsigned long long v;\n'
                    '  asm volatile("ld.param::entry.u64 %0, [%1];" : "=l"(v) : "l"(off));\n  out[threadIdx.x] = v;\n}',
    "vector past the last parameter": 'extern "C" __global__ void k(unsigned long long* out, unsigned n) {\n'
                                      '  unsigned a, b, c, d;\n  asm volatile("ld.param.v4.u32 {%0, %1, %2, %3}, '
                                      '[k_param_1];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d));\n'
                                      '  out[threadIdx.x] = a + b + c + d;\n}',
    "pragma before the body": (ATTACKS / "pragma_header.cu").read_text(),
    "register named as a parameter": (ATTACKS / "register_named_as_parameter.cu").read_text(),
}


@pytest.mark.parametrize("how", sorted(DISGUISED_PARAMETER_READS))
def test_disguised_parameter_reads_are_refused(how):
    r = compile_kernel(DISGUISED_PARAMETER_READS[how], "k", "sm_90", [], use_cache=False)
    assert not r.ok and r.error == "PARAMETER_ADDRESS", (r.error, r.log)


@pytest.mark.parametrize("source", [
    'extern "C" __global__ void k(const float* x, float* y, int n) {\n'
    '  if (threadIdx.x == 0) printf("n=%d x0=%f\\n", n, x[0]);\n  y[threadIdx.x] = x[threadIdx.x];\n}',
    '#include <cuda/std/cassert>\nextern "C" __global__ void k(const float* x, float* y, int n) {\n'
    '  assert(n > 0);\n  y[threadIdx.x] = x[threadIdx.x];\n}',
])
def test_printf_and_assert_stay_allowed(source):
    """Their PTX has a `.global` string initialiser after an `.extern .func` prototype: a block that is an
    initialiser, not a function's body."""
    r = compile_kernel(source, "k", "sm_90", [], use_cache=False)
    assert r.ok, (r.error, r.log)


def test_a_debug_line_directive_hides_no_instruction():
    """`.loc` ends at the line's end, not at a `;`: read as one statement with the instruction after it, a
    `.loc` before each of the address's `mov` and `cvta.param` would hide both (with -lineinfo, an allowed
    option)."""
    source = ('struct Args { unsigned long long* out; long long first; };\n'
              'extern "C" __global__ void k(const __grid_constant__ Args a) {\n  unsigned long long p;\n'
              '  asm volatile(".loc 1 1 0\\n\\tmov.b64 %0, k_param_0;\\n.loc 1 1 0\\n\\tcvta.param.u64 %0, %0;" : "=l"(p));\n'
              '  a.out[threadIdx.x] = reinterpret_cast<volatile unsigned long long*>(p)[a.first + threadIdx.x];\n}')
    r = compile_kernel(source, "k", "sm_90", ["-lineinfo"], use_cache=False)
    assert not r.ok and r.error == "PARAMETER_ADDRESS", (r.error, r.log)
    honest = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.f; }\n'
    assert compile_kernel(honest, "k", "sm_90", ["-lineinfo"], use_cache=False).ok


@pytest.mark.parametrize("name", ["register_range_named_as_parameter.cu", "b128_past_the_parameters.cu"])
def test_register_ranges_and_wide_reads_past_the_parameters_are_refused(name):
    """`.reg .b64 k_param_<1>` declares a register k_param_0 (`[k_param_0]` then reads bank 0 at a register's
    offset); `ld.param.b128` taken for 8 bytes would read 8 past the parameters."""
    r = compile_kernel((ATTACKS / name).read_text(), "k", "sm_90", [], use_cache=False)
    assert not r.ok and r.error == "PARAMETER_ADDRESS", (r.error, r.log)


def test_lineinfo_debug_strings_of_inlined_headers_stay_allowed():
    """With -lineinfo, an inlined header function (cooperative groups' cluster rank) brings a top-level
    `.section .debug_str { labels: .b8 ... }`: data, not a function, and allowed."""
    r = compile_kernel((ATTACKS / "honest_cluster_rank.cu").read_text(), "k", "sm_90", ["-lineinfo"], use_cache=False)
    assert r.ok, (r.error, r.log)


def test_a_register_range_names_every_split_of_its_digits():
    """`.reg .b64 q1<3>` declares q10, q11, q12: a parameter named like one of them is refused however the
    trailing digits split; names outside the range are not."""
    from warpsmith.agent.runtime.ptx_parameters import _in_range
    assert _in_range("q12", {"q1": 3}) and _in_range("q12", {"q": 13}) and _in_range("k_param_0", {"k_param_": 1})
    assert not _in_range("q12", {"q": 12}) and not _in_range("k_param_01", {"k_param_": 5})
