// rmsnorm_bf16_vec8: one block per row, the row held in registers as 16-byte
// vectors (8 bfloat16 each), read from DRAM once and written once.
//
// Launch rule:
//   block = (BLOCK, 1, 1)
//   grid  = (rows, 1, 1)
//
// Why: rowblock.cu moves 2 bytes per load and reads x twice (once for the sum of
// squares, once for the output). Here a thread loads up to VEC uint4s of the row
// (8 values each), keeps them in registers across the block reduction and writes
// uint4s of y: 8x fewer memory instructions, and x leaves DRAM once (streaming
// loads and stores: neither is read again; weight, shared by every row, is a
// default-cached load that stays in L2).
//
// Path (uniform per launch): rows of cols % 8 == 0 with 16-byte aligned bases and
// at most VEC * BLOCK vectors take the register path; anything else (ragged cols,
// longer rows) takes the scalar two-pass loop of rowblock.cu, correct for any size.
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

// x loads and y stores evict-first (1: __ldcs / __stcs, neither is read again) or plain (0);
// 2: only the loads evict-first, 3: only the stores (which of the two helps is unmeasured:
// torch.compile ran 8192x8192 at 93% of the floor on the H200, vec8 at 89%)
// knob HINT: 0 2 1 3
#ifndef HINT
#define HINT 1
#endif

// weight's uint4s loaded before the block reduction (1), so their L2 latency overlaps the
// barrier, or after it (0)
// knob WPRE: 0 1
#ifndef WPRE
#define WPRE 0
#endif

// An L2 prefetch-size hint on x's loads: none (0), 128 bytes (1) or 256 bytes (2), i.e. the
// L2 fetches the whole 128/256-byte span around a load from DRAM at once (PTX's
// .L2::128B / .L2::256B). Torch.compile's Triton kernel ran 1% faster than vec8 on an
// H100's 8192x8192 with the same row per block and vectors; the hint is one
// difference a Triton load does not have, measured rather than assumed.
// knob PF: 0 1 2
#ifndef PF
#define PF 0
#endif

#if PF == 1
#define PF_SIZE ".L2::128B"
#elif PF == 2
#define PF_SIZE ".L2::256B"
#endif

// Blocks per SM that ptxas must fit (__launch_bounds__'s second argument; 0: none). The
// bytes a block keeps in flight are its row (VEC uint4s per thread), and the SM's rows in
// flight are what hides DRAM latency: unbounded, BLOCK=256 VEC=4 took 46 registers, 5
// blocks per SM (80 KiB of loads in flight); MINB=8 asks for 32, 8 blocks (128 KiB).
// knob MINB: 0 6 8
#ifndef MINB
#define MINB 0
#endif

#if MINB * BLOCK > 2048
#error "MINB blocks of BLOCK threads do not fit an SM (2048 threads)"
#endif

#if MINB > 0
#define BOUNDS __launch_bounds__(BLOCK, MINB)
#else
#define BOUNDS __launch_bounds__(BLOCK)
#endif

#define NWARPS (BLOCK / 32)

__device__ __forceinline__ uint4 load_x(const uint4* p)
{
#if PF && (HINT == 1 || HINT == 2)
    uint4 v;  // not volatile: x is never written while the kernel runs, so loads may move
    asm("ld.global.cs" PF_SIZE ".v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#elif PF
    uint4 v;
    asm("ld.global" PF_SIZE ".v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#elif HINT == 1 || HINT == 2
    return __ldcs(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ void store_y(uint4* p, const uint4& v)
{
#if HINT == 1 || HINT == 3
    __stcs(p, v);
#else
    *p = v;
#endif
}

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
    for (int w = 0; w < NWARPS; ++w)  // every thread sums the few warp partials: no second barrier
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

extern "C" __global__ void BOUNDS
rmsnorm_bf16_vec8(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                  __nv_bfloat16* __restrict__ y, int rows, int cols, float eps)
{
    __shared__ float scratch[NWARPS];
    const long long row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * cols;
    __nv_bfloat16* yr = y + row * cols;
    const int nvec = cols >> 3;
    const bool vec = (cols & 7) == 0 && nvec <= VEC * BLOCK
        && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(weight)) & 15) == 0;

    if (vec) {
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        uint4 r[VEC];
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int idx = threadIdx.x + i * BLOCK;
            r[i] = idx < nvec ? load_x(xv + idx) : make_uint4(0u, 0u, 0u, 0u);
            sum += sum_squares8(r[i]);
        }
        const uint4* wv = reinterpret_cast<const uint4*>(weight);
#if WPRE
        uint4 w[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int idx = threadIdx.x + i * BLOCK;
            w[i] = idx < nvec ? __ldg(wv + idx) : make_uint4(0u, 0u, 0u, 0u);
        }
#endif
        const float inv = rsqrtf(block_sum(sum, scratch) / cols + eps);
        uint4* yv = reinterpret_cast<uint4*>(yr);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int idx = threadIdx.x + i * BLOCK;
#if WPRE
            if (idx < nvec)
                store_y(yv + idx, scale8(r[i], w[i], inv));
#else
            if (idx < nvec)
                store_y(yv + idx, scale8(r[i], __ldg(wv + idx), inv));
#endif
        }
        return;
    }

    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
        const float v = __bfloat162float(xr[c]);
        sum = fmaf(v, v, sum);
    }
    const float inv = rsqrtf(block_sum(sum, scratch) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(weight[c]));
}
