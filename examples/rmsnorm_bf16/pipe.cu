// rmsnorm_bf16_pipe: vec8.cu's row in registers as 16-byte vectors, but a resident
// grid of blocks that each walk many rows, the next row's loads issued before the
// current row's reduction.
//
// Launch rule:
//   block = (BLOCK, 1, 1)
//   grid  = (min(GRID, rows), 1, 1)
// Block b does rows b, b + gridDim.x, b + 2 gridDim.x, ...
//
// Why: vec8.cu (84% of the floor) gives a row to a block: its loads, then a block
// reduction, then a weight load (an L1/L2 round trip after the reduction), then its
// stores, exit. A block's DRAM reads stop while it reduces and writes, and 16384
// blocks of 8 KiB come and go. Here, while a block reduces and writes row r, row
// r + gridDim.x is already in flight into a second register buffer; its weight
// slice is either kept in registers for all its rows or (WREG = 0) re-read from L1
// per row, issued before the reduction. One barrier per row: the warp
// partials go to a scratch buffer chosen by row parity (a thread writes the buffer
// of row k + 2 only after the barrier of row k + 1, which every thread reaches
// after reading row k's partials).
//
// Path (uniform per launch): cols % 8 == 0 with 16-byte aligned bases and at most
// VEC * BLOCK vectors per row take the register path (thread t holds vectors
// t + i * BLOCK, i < VEC, of the row and of weight); anything else (ragged cols,
// longer rows) takes a scalar two-pass loop, correct for any size.
// Accumulation: float32 throughout (the workload's policy); one rounding per output.
#include <cuda_bf16.h>

// knob BLOCK: 128 256 512 1024
#ifndef BLOCK
#define BLOCK 256
#endif

// knob VEC: 1 2 4 8
#ifndef VEC
#define VEC 4
#endif

// knob GRID: 264 396 528 792 1056 1584 2112 100000
#ifndef GRID
#define GRID 396
#endif

// Blocks per SM that ptxas must fit (a register cap of 65536 / (BLOCK * MINB)):
// at the defaults 79 registers, no spill, 3 blocks per SM, hence GRID = 3 x 132.
// knob MINB: 1 2 3 4 5 6 8
#ifndef MINB
#define MINB 3
#endif

// Weight held in registers for all the block's rows (1), or read per row with
// cached loads, issued before the row's reduction so the L1 hit hides behind the
// barrier (0: VEC uint4s fewer registers; at BLOCK = 256, VEC = 4 the registers'
// copy spills under MINB = 4).
// knob WREG: 0 1
#ifndef WREG
#define WREG 0
#endif

#define NWARPS (BLOCK / 32)

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024, "BLOCK must be a multiple of 32 in [32, 1024]");

// Sum over the block; `scratch` holds NWARPS floats and is not reused before the
// next barrier of the block (the caller alternates two of them).
__device__ __forceinline__ float block_sum(float v, float* scratch)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0)
        scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w)
        total += scratch[w];
    return total;
}

__device__ __forceinline__ float sum_squares8(const uint4& u)
{
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        s = fmaf(f.x, f.x, s);
        s = fmaf(f.y, f.y, s);
    }
    return s;
}

__device__ __forceinline__ uint4 scale8(const uint4& xu, const uint4& wu, float inv)
{
    const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&xu);
    const __nv_bfloat162* wh = reinterpret_cast<const __nv_bfloat162*>(&wu);
    uint4 out;
    __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 xf = __bfloat1622float2(xh[i]);
        const float2 wf = __bfloat1622float2(wh[i]);
        oh[i] = __floats2bfloat162_rn(xf.x * inv * wf.x, xf.y * inv * wf.y);
    }
    return out;
}

__device__ __forceinline__ void load_row(uint4 (&r)[VEC], const __nv_bfloat16* __restrict__ x, long long row,
                                         int cols, int nvec)
{
    const uint4* xv = reinterpret_cast<const uint4*>(x + row * cols);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int idx = threadIdx.x + i * BLOCK;
        r[i] = idx < nvec ? __ldcs(xv + idx) : make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ void load_weight(uint4 (&w)[VEC], const __nv_bfloat16* __restrict__ weight, int nvec)
{
    const uint4* wv = reinterpret_cast<const uint4*>(weight);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int idx = threadIdx.x + i * BLOCK;
        w[i] = idx < nvec ? __ldg(wv + idx) : make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ void finish_row(const uint4 (&r)[VEC], const uint4 (&wreg)[VEC],
                                           const __nv_bfloat16* __restrict__ weight,
                                           __nv_bfloat16* __restrict__ y, long long row, int cols, int nvec,
                                           float eps, float* scratch)
{
#if WREG
    const uint4 (&w)[VEC] = wreg;
#else
    uint4 w[VEC];
    load_weight(w, weight, nvec);  // before the barrier: its latency hides behind the reduction
#endif
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) sum += sum_squares8(r[i]);
    const float inv = rsqrtf(block_sum(sum, scratch) / cols + eps);
    uint4* yv = reinterpret_cast<uint4*>(y + row * cols);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int idx = threadIdx.x + i * BLOCK;
        if (idx < nvec) __stcs(yv + idx, scale8(r[i], w[i], inv));
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK, MINB)
rmsnorm_bf16_pipe(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                  __nv_bfloat16* __restrict__ y, int rows, int cols, float eps)
{
    __shared__ float scratch[2][NWARPS];  // by row parity: see the header
    const long long step = gridDim.x;
    const int nvec = cols >> 3;
    const bool vec = (cols & 7) == 0 && nvec <= VEC * BLOCK
        && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(weight)) & 15) == 0;

    if (vec) {
        uint4 a[VEC], b[VEC];
#if WREG
        uint4 w[VEC];
#else
        uint4 (&w)[VEC] = a;  // unused by finish_row: it loads its own
#endif
        long long row = blockIdx.x;
        if (row < rows) load_row(a, x, row, cols, nvec);
#if WREG
        load_weight(w, weight, nvec);
#endif
        for (; row < rows; row += 2 * step) {  // row: uniform per block
            if (row + step < rows) load_row(b, x, row + step, cols, nvec);
            finish_row(a, w, weight, y, row, cols, nvec, eps, scratch[0]);
            if (row + step >= rows) break;
            if (row + 2 * step < rows) load_row(a, x, row + 2 * step, cols, nvec);
            finish_row(b, w, weight, y, row + step, cols, nvec, eps, scratch[1]);
        }
        return;
    }

    for (long long row = blockIdx.x, k = 0; row < rows; row += step, ++k) {
        const __nv_bfloat16* xr = x + row * cols;
        __nv_bfloat16* yr = y + row * cols;
        float sum = 0.0f;
        for (int c = threadIdx.x; c < cols; c += BLOCK) {
            const float v = __bfloat162float(xr[c]);
            sum = fmaf(v, v, sum);
        }
        const float inv = rsqrtf(block_sum(sum, scratch[k & 1]) / cols + eps);
        for (int c = threadIdx.x; c < cols; c += BLOCK)
            yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(weight[c]));
    }
}
