// rmsnorm_bf16_team: a row per team of warps (one warp for cols <= 256 * VEC, two
// for cols <= 512 * VEC, ...), the row in registers as 16-byte vectors, reduced by
// shuffles and, for a team of several warps, a named barrier of that team alone; no
// block-wide barrier on the fast path, so the teams of an SM run out of step and
// their loads overlap one another's reductions and stores.
//
// Launch rule:
//   block = (BLOCK, 1, 1)
//   grid  = (min(GRID, ceil_div(rows * ceil_div(cols, 256 * VEC), BLOCK / 32)), 1, 1)
// Correct for any grid: rows are walked grid-stride. Fast path (uniform per launch:
// cols % 8 == 0, 16-byte aligned bases, K = ceil_div(cols / 8, 32 * VEC) <= BLOCK/32
// warps per team): team j of block b (warps j*K .. j*K + K-1; T = (BLOCK/32) / K teams
// per block) does rows b*T + j, + gridDim.x*T, ...; warps past T*K idle. Thread t of
// a team (t < 32K) holds uint4s t + i*32K, i < VEC, of the row. The weight is read
// per row from L1 (ld.global.nc, 8-16 KiB, shared by every row), one uint4 before each store. Anything else (ragged
// cols, longer rows) takes a block-wide scalar two-pass loop, block b doing rows
// b, b + gridDim.x, ...
//
// Why: pipe.cu and vec8.cu (80-84% of the floor) give a row to a whole block, so a
// block's loads stop at each row's __syncthreads; here 4096 columns are two warps',
// 8192
// four warps at VEC = 8, ~8 rows (64 KiB) in flight per SM at once.
// Accumulation: float32 throughout; one rounding per output (as pipe.cu).
#include <cuda_bf16.h>

// Defaults measured best in a knob sweep on the H200: VEC=4 MINB=4 ran 16384x4096 and
// 8192x8192 in 0.0750 / 0.0751 ms (VEC=8 MINB=2: 0.0768 / 0.0766).

// knob BLOCK: 128 256 512
#ifndef BLOCK
#define BLOCK 256
#endif

// uint4 (8 bf16) per thread per row
// knob VEC: 4 8 16
#ifndef VEC
#define VEC 4
#endif

// knob GRID: 264 528 792 1056 100000
#ifndef GRID
#define GRID 100000
#endif

// knob MINB: 1 2 3 4
#ifndef MINB
#define MINB 4
#endif

#define NWARPS (BLOCK / 32)

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 512, "BLOCK must be a multiple of 32 in [32, 512] (named barriers 1..15)");

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One fma chain through the whole row (s in, s out): fewer live temporaries.
__device__ __forceinline__ float sum_squares8(const uint4& u, float s)
{
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
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

// The weight load and the store as volatile asm: kept in program order, so the
// compiler cannot hoist all VEC weight loads ahead of the stores (VEC more uint4
// registers, spills at 3 blocks per SM). Each weight load is an L1 hit.
__device__ __forceinline__ uint4 ldg_nc_ordered(const uint4* p)
{
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void stcs_ordered(uint4* p, const uint4& v)
{
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

__device__ __forceinline__ void named_sync(int id, int nthreads)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(nthreads) : "memory");
}

extern "C" __global__ void __launch_bounds__(BLOCK, MINB)
rmsnorm_bf16_team(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                  __nv_bfloat16* __restrict__ y, int rows, int cols, float eps)
{
    __shared__ float scratch[2][NWARPS];  // team partials by row parity (pipe.cu's scheme)
    const int nvec = cols >> 3;
    const int K = (nvec + 32 * VEC - 1) / (32 * VEC);  // warps per team (0 when cols < 8)
    const bool fast = (cols & 7) == 0 && K >= 1 && K <= NWARPS
        && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(weight)) & 15) == 0;

    if (fast) {
        const int warp = threadIdx.x >> 5;
        const int T = NWARPS / K;  // teams per block
        const int team = warp / K;
        if (team >= T) return;  // idle warps: in no team's barrier
        const int t = threadIdx.x - team * K * 32;  // thread within the team
        const int TT = K * 32;
        const uint4* wv = reinterpret_cast<const uint4*>(weight);
        const long long step = (long long)gridDim.x * T;
        int parity = 0;
        for (long long row = (long long)blockIdx.x * T + team; row < rows; row += step, parity ^= 1) {
            const uint4* xv = reinterpret_cast<const uint4*>(x + row * cols);
            uint4 r[VEC];
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const int idx = t + i * TT;
                r[i] = idx < nvec ? __ldcs(xv + idx) : make_uint4(0u, 0u, 0u, 0u);
            }
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < VEC; ++i) sum = sum_squares8(r[i], sum);
            sum = warp_sum(sum);
            if (K > 1) {
                float* sc = scratch[parity];
                if ((threadIdx.x & 31) == 0) sc[warp] = sum;
                named_sync(1 + team, TT);
                sum = 0.0f;
                for (int w = 0; w < K; ++w) sum += sc[team * K + w];
            }
            const float inv = rsqrtf(sum / cols + eps);
            uint4* yv = reinterpret_cast<uint4*>(y + row * cols);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const int idx = t + i * TT;
                if (idx < nvec) stcs_ordered(yv + idx, scale8(r[i], ldg_nc_ordered(wv + idx), inv));
            }
        }
        return;
    }

    // block-wide scalar two-pass loop, any size
    const int lane = threadIdx.x & 31;
    for (long long row = blockIdx.x, k = 0; row < rows; row += gridDim.x, ++k) {
        const __nv_bfloat16* xr = x + row * cols;
        __nv_bfloat16* yr = y + row * cols;
        float sum = 0.0f;
        for (int c = threadIdx.x; c < cols; c += BLOCK) {
            const float v = __bfloat162float(xr[c]);
            sum = fmaf(v, v, sum);
        }
        sum = warp_sum(sum);
        float* sc = scratch[k & 1];
        if (lane == 0) sc[threadIdx.x >> 5] = sum;
        __syncthreads();
        float total = 0.0f;
        for (int w = 0; w < NWARPS; ++w) total += sc[w];
        const float inv = rsqrtf(total / cols + eps);
        for (int c = threadIdx.x; c < cols; c += BLOCK)
            yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(weight[c]));
    }
}
