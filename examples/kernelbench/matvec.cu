// matvec_rows: out[m] = sum over k of A[m, k] * B[k], A of M x K and B of K x 1, fp32,
// accumulated in fp32. One warp per row: its lanes read consecutive elements of the row
// (coalesced) into ACC independent sums (more loads in flight per lane), which meet by
// shuffles. B (K floats) is read by every warp and stays in L2.
// Launch: grid = (ceil_div(M, WARPS)), block = (WARPS * 32): WARPS rows a block.

// rows (warps) per block
// knob WARPS: 8 4 16
#ifndef WARPS
#define WARPS 8
#endif

// independent partial sums per lane
// knob ACC: 4 1 2 8
#ifndef ACC
#define ACC 4
#endif

extern "C" __global__ void __launch_bounds__(WARPS * 32)
matvec_rows(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ out, int M, int K)
{
    const int lane = threadIdx.x & 31;
    const int m = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (m >= M) return;  // uniform per warp
    const float* a = A + (size_t)m * K;
    float acc[ACC];
#pragma unroll
    for (int u = 0; u < ACC; ++u) acc[u] = 0.0f;
    int k = lane;
    for (; k + 32 * (ACC - 1) < K; k += 32 * ACC)
#pragma unroll
        for (int u = 0; u < ACC; ++u) acc[u] += a[k + 32 * u] * B[k + 32 * u];
    for (; k < K; k += 32) acc[0] += a[k] * B[k];
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < ACC; ++u) s += acc[u];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[m] = s;
}
