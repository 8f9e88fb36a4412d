// attention_rowwarp: the simple starting point. One warp per query row: each lane
// holds D / 32 elements of q and of the output accumulator; for every key the warp
// reduces the dot product with shuffles and updates an online softmax (running max
// m, running sum l, accumulator rescaled by exp(m_old - m_new)), all in float32.
// No tensor cores, no tiling: K and V rows are re-read from L2 by every query row.
//
// Launch rule:
//   block = (32 * WARPS, 1, 1)   one warp per query row
//   grid  = (ceil_div(S, WARPS), BH, 1)
//
// D <= 128 (at most 4 elements per lane); any S >= 1.
#include <cuda_bf16.h>

// knob WARPS: 1 2 4 8
#ifndef WARPS
#define WARPS 4
#endif

#define MAX_PER_LANE 4  // D <= 128

extern "C" __global__ void __launch_bounds__(32 * WARPS)
attention_rowwarp(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                  const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o,
                  int BH, int S, int D, int causal)
{
    const int lane = threadIdx.x & 31;
    const int i = blockIdx.x * WARPS + (threadIdx.x >> 5);  // query row
    const long long h = blockIdx.y;
    if (i >= S || D > 32 * MAX_PER_LANE)
        return;  // whole warps leave together: no shuffle below misses a lane
    const long long base = h * S * D;
    const float scale = rsqrtf((float)D);

    float qv[MAX_PER_LANE], acc[MAX_PER_LANE];
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; ++e) {
        const int d = lane + 32 * e;
        qv[e] = d < D ? __bfloat162float(q[base + (long long)i * D + d]) * scale : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -__int_as_float(0x7f800000), l = 0.0f;  // -inf: no <math.h> under NVRTC
    const int last = causal ? i : S - 1;
    for (int j = 0; j <= last; ++j) {
        const __nv_bfloat16* kr = k + base + (long long)j * D;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; ++e) {
            const int d = lane + 32 * e;
            if (d < D)
                s = fmaf(qv[e], __bfloat162float(kr[d]), s);
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, offset);
        const float m_new = fmaxf(m, s);
        const float correction = expf(m - m_new);  // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * correction + p;
        const __nv_bfloat16* vr = v + base + (long long)j * D;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; ++e) {
            const int d = lane + 32 * e;
            if (d < D)
                acc[e] = fmaf(p, __bfloat162float(vr[d]), acc[e] * correction);
        }
        m = m_new;
    }
    const float inv_l = 1.0f / l;
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; ++e) {
        const int d = lane + 32 * e;
        if (d < D)
            o[base + (long long)i * D + d] = __float2bfloat16(acc[e] * inv_l);
    }
}
