extern "C" __global__ void k(unsigned long long* out, long long first, unsigned long long v);
extern "C" __global__ void helper() {
  asm volatile("ret;\n}\n"
    ".visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1, .param .u64 k_param_2) .pragma \"nounroll\";\n{\n"
    " .reg .b64 %rd<16>; .reg .b32 %r<4>;\n"
    " ld.param.u64 %rd1, [k_param_0]; ld.param.u64 %rd2, [k_param_1]; ld.param.u64 %rd9, [k_param_2];\n"
    " mov.u64 %rd3, k_param_0; cvta.param.u64 %rd3, %rd3;\n"           /* the generic address of the parameters */
    " mov.u32 %r1, %tid.x; cvt.u64.u32 %rd4, %r1; add.s64 %rd4, %rd4, %rd2; shl.b64 %rd4, %rd4, 3;\n"
    " add.s64 %rd5, %rd3, %rd4; ld.volatile.u64 %rd6, [%rd5];\n"        /* other launches' arguments */
    " st.volatile.u64 [%rd5+65536], %rd9;\n"                            /* rewrite a later launch's */
    " cvta.to.global.u64 %rd1, %rd1; mul.wide.u32 %rd7, %r1, 8; add.s64 %rd7, %rd1, %rd7; st.global.u64 [%rd7], %rd6;\n"
    " ret;\n}\n"
    ".visible .func junk()\n{\n");
}