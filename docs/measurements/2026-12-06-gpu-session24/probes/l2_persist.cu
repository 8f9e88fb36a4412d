// Probe: do L2 lines a kernel loaded with the evict_last policy survive warpsmith's "cold" L2
// flush (cuMemsetD32Async over max(2 x L2, 64 MiB), native/device.cpp flush_l2)?
// If so, a kernel whose last pass over its input uses evict_last is timed with part of its
// input already in L2 at its next launch: "cold" timing that is warm.
typedef unsigned long long u64;
extern "C" __global__ void read_sum(const float4* __restrict__ x, u64 n4, float* out, int evict_last) {
  float s = 0.f;
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n4; i += (u64)gridDim.x * blockDim.x) {
    float4 v;
    if (evict_last)
      asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(x + i), "l"(policy));
    else
      v = x[i];
    s += v.x + v.y + v.z + v.w;
  }
  if (s == 12345.f) out[0] = s;  // keeps the loads
}
