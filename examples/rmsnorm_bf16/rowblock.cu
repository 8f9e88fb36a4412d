// One block per row: sum the squares in float32 (each thread strided, then warp
// shuffles, then shared memory), then scale and round each element to bfloat16 once.
#include <cuda_bf16.h>

// knob BLOCK: 128 256 512 1024
#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_bf16_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                  __nv_bfloat16* __restrict__ y, int rows, int cols, float eps)
{
    __shared__ float partial[BLOCK / 32];
    __shared__ float inv_rms;
    const long long row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * cols;
    __nv_bfloat16* yr = y + row * cols;

    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
        float v = __bfloat162float(xr[c]);
        sum = fmaf(v, v, sum);
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if ((threadIdx.x & 31) == 0)
        partial[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < BLOCK / 32; ++w)
            total += partial[w];
        inv_rms = rsqrtf(total / cols + eps);
    }
    __syncthreads();
    const float scale = inv_rms;
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * scale * __bfloat162float(weight[c]));
}
