extern "C" __device__ __noinline__ unsigned long long idf(unsigned long long x) { return x; }
extern "C" __global__ void k(unsigned long long* out, long long first, unsigned long long v) {
  unsigned long long p;
  if (first == 12345) out[0] = idf(clock64());  // keeps idf in the PTX
  asm volatile("{ .param .b64 param0; st.param.b64 [param0], %1; .param .b64 retval0;\n"
               "call.uni (retval0), idf, (param0);\n"
               "{ .reg .b64 k_param_0;\n"                 /* a register with the first parameter's name */
               "  ld.param.b64 k_param_0, [retval0];\n"   /* -0x78 into it */
               "  ld.param.u64 %0, [k_param_0]; } }"      /* c[0x0][R+0x210] = c[0x0][0x198] */
               : "=l"(p) : "l"(-0x78LL));
  volatile unsigned long long* ring = reinterpret_cast<volatile unsigned long long*>(p);
  out[threadIdx.x] = ring[first + threadIdx.x];
  ring[first + 8192 + threadIdx.x] = v;
}