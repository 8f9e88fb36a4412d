// One block per row: sum the squares in float32 (each thread strided, then warp
// shuffles, then shared memory), then scale and round each element to bfloat16 once.
// When cols is a multiple of 8, every row starts on a 16-byte boundary (the base
// pointers are 256-byte aligned), so x, weight and y move 8 elements per access.
#include <cuda_bf16.h>

// knob BLOCK: 128 256 512 1024
#ifndef BLOCK
#define BLOCK 256
#endif

union bf16x8 {
    uint4 raw;
    __nv_bfloat162 pair[4];
};

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_bf16_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                  __nv_bfloat16* __restrict__ y, int rows, int cols, float eps)
{
    __shared__ float partial[BLOCK / 32];
    __shared__ float inv_rms;
    const long long row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * cols;
    __nv_bfloat16* yr = y + row * cols;
    const bool vector = (cols & 7) == 0;

    float sum = 0.0f;
    if (vector) {
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        for (int i = threadIdx.x; i < cols / 8; i += BLOCK) {
            bf16x8 p;
            p.raw = xv[i];
            for (int j = 0; j < 4; ++j) {
                float2 f = __bfloat1622float2(p.pair[j]);
                sum = fmaf(f.x, f.x, sum);
                sum = fmaf(f.y, f.y, sum);
            }
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += BLOCK) {
            float v = __bfloat162float(xr[c]);
            sum = fmaf(v, v, sum);
        }
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
    if (vector) {
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        const uint4* wv = reinterpret_cast<const uint4*>(weight);
        uint4* yv = reinterpret_cast<uint4*>(yr);
        for (int i = threadIdx.x; i < cols / 8; i += BLOCK) {
            bf16x8 px, pw, py;
            px.raw = xv[i];
            pw.raw = wv[i];
            for (int j = 0; j < 4; ++j) {
                float2 fx = __bfloat1622float2(px.pair[j]), fw = __bfloat1622float2(pw.pair[j]);
                py.pair[j] = __floats2bfloat162_rn(fx.x * scale * fw.x, fx.y * scale * fw.y);
            }
            yv[i] = py.raw;
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += BLOCK)
            yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * scale * __bfloat162float(weight[c]));
    }
}
