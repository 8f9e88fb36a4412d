// layernorm_twopass: row-wise fp32 layer norm, one thread block per row, the row
// streamed twice in float4s: pass 1 makes each thread's (count, mean, M2) over what it
// reads, merged across the block by Chan's formula; pass 2 re-reads the row (from L2)
// and writes y. Nothing of the row is held in registers across the block reduction.
//   mean = sum_c x[r, c] / cols,  var = sum_c (x[r, c] - mean)^2 / cols
//   y[r, c] = (x[r, c] - mean) * rsqrt(var + 1e-5) * weight[c] + bias[c]
//
// Launch rule:
//   block  = (BLOCK, 1, 1)
//   grid   = (rows, 1, 1)
//   shared = 0   (static: 3 * BLOCK/32 floats of partials)
//
// Why: welford.cu and rowblock.cu hold the row in registers across the barrier (up to
// 32 floats a thread at 8192 columns), which bounds the blocks an SM holds; at 8192
// columns they ran 0.8-1.5% behind torch.compile on an H100, whose Triton
// kernel (benchmarks/inductor_source.py) loops over the row twice: pass 1 with an L2
// evict-last policy, so the second read is an L2 hit, pass 2 evict-first. DRAM still
// sees the row once, and an SM keeps more rows in flight.
//
// Each loop step a thread reads U float4s and folds their exact two-pass (mean, M2)
// into its own by Chan's merge: no E[x^2] - mean^2 cancellation anywhere.
// Path (uniform per launch): cols % 4 == 0 and 16-byte aligned x, y, weight, bias take
// the float4 loops; anything else takes the same two passes over scalars.

// PASSES=3 streams the row three times instead, each thread keeping two floats, not
// moments: the sum (pass 1), the squared deviations from the block's mean (pass 2, an L2
// hit), then y (pass 3, an L2 hit): the exact two-pass variance of rowblock.cu without its
// registers, and two barriers. At PASSES=2, U=2 ptxas took 64 registers (Chan's merge
// per step and weight and bias beside the row's vectors) and ran 9% behind torch.compile.
// knob PASSES: 2 3
#ifndef PASSES
#define PASSES 2
#endif

// knob BLOCK: 256 512 1024 128
#ifndef BLOCK
#define BLOCK 256
#endif

// float4 loads a thread issues together per loop step
// knob U: 2 4 1 8
#ifndef U
#define U 2
#endif

// L2 policies on the two passes: evict-last then evict-first (1), or plain loads (0)
// knob EL: 1 0
#ifndef EL
#define EL 1
#endif

// The cache policies (createpolicy, .L2::cache_hint) exist from sm_80: older GPUs take plain loads.
#if EL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define L2_POLICIES 1
#else
#define L2_POLICIES 0
#endif

// Blocks per SM that ptxas must fit (__launch_bounds__'s second argument; 0: none): at
// BLOCK=256 U=2 ptxas takes 64 registers (4 blocks per SM), 40 under MINB=6 and 32 under
// MINB=8, which spills at U >= 2 (U=1 fits 32 without)
// knob MINB: 0 6 8 4
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
#define LN_EPS 1e-5f

struct Moments {
    float n, mean, m2;  // count (exact in fp32 below 2^24), mean, sum of squared deviations
};

__device__ __forceinline__ Moments merge(const Moments& a, const Moments& b)
{
    const float n = a.n + b.n;
    if (n == 0.0f)
        return a;
    const float delta = b.mean - a.mean;
    const float wb = b.n / n;
    return Moments{n, fmaf(delta, wb, a.mean), a.m2 + b.m2 + delta * delta * a.n * wb};
}

__device__ __forceinline__ Moments warp_merge(Moments v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const Moments other{__shfl_xor_sync(0xffffffffu, v.n, o), __shfl_xor_sync(0xffffffffu, v.mean, o),
                            __shfl_xor_sync(0xffffffffu, v.m2, o)};
        // The lower lane's partial first in both lanes of a pair, so they compute the same merge.
        v = (threadIdx.x & o) ? merge(other, v) : merge(v, other);
    }
    return v;
}

// The block's moments in every thread: one barrier; `part` is not reused afterwards.
__device__ __forceinline__ Moments block_merge(Moments v, float* part)
{
    v = warp_merge(v);
    if ((threadIdx.x & 31) == 0) {
        const int w = threadIdx.x >> 5;
        part[3 * w] = v.n;
        part[3 * w + 1] = v.mean;
        part[3 * w + 2] = v.m2;
    }
    __syncthreads();
    Moments total{part[0], part[1], part[2]};
#pragma unroll
    for (int w = 1; w < NWARPS; ++w)
        total = merge(total, Moments{part[3 * w], part[3 * w + 1], part[3 * w + 2]});
    return total;
}

// The block's sum in every thread: one barrier. Each call gets its own NWARPS slots of
// `part` (3 * NWARPS floats), so no barrier is needed before the second call writes.
__device__ __forceinline__ float block_sum(float v, float* slots)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        slots[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w)  // the same order in every thread: all agree bit for bit
        total += slots[w];
    return total;
}

__device__ __forceinline__ unsigned long long l2_policy(bool keep)
{
    unsigned long long p = 0;  // unused without L2_POLICIES: plain loads
#if L2_POLICIES
    if (keep)
        asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    else
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}

// Not volatile: nothing this kernel reads is written while it runs, so the loads may move.
__device__ __forceinline__ float4 load_hinted(const float4* p, unsigned long long policy)
{
#if L2_POLICIES
    float4 v;
    asm("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
    return v;
#else
    return *p;
#endif
}

extern "C" __global__ void BOUNDS
layernorm_twopass(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                  float* __restrict__ y, int rows, int cols)
{
    __shared__ float part[3 * NWARPS];
    const int row = blockIdx.x;
    if (row >= rows)
        return;  // uniform per block: no barrier is skipped
    const size_t base = (size_t)row * (size_t)cols;  // rows * cols can pass 2^31
    const float* xr = x + base;
    float* yr = y + base;
    const int tid = threadIdx.x;
    const bool vec = (cols & 3) == 0
        && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(weight)
             | reinterpret_cast<size_t>(bias)) & 15) == 0;

    if (vec) {
        const int n4 = cols >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(weight);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        float4* y4 = reinterpret_cast<float4*>(yr);
        const unsigned long long keep = l2_policy(true), drop = l2_policy(false);
#if PASSES == 3
        float s = 0.0f;
        for (int q0 = tid; q0 < n4; q0 += U * BLOCK) {
            float4 v[U];
#pragma unroll
            for (int i = 0; i < U; ++i) {  // all U loads issued before any is used
                const int q = q0 + i * BLOCK;
                v[i] = q < n4 ? load_hinted(x4 + q, keep) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int i = 0; i < U; ++i)
                s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        }
        const float mean = block_sum(s, part) / (float)cols;
        float d = 0.0f;
        for (int q0 = tid; q0 < n4; q0 += U * BLOCK) {
            float4 v[U];
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const int q = q0 + i * BLOCK;
                v[i] = q < n4 ? load_hinted(x4 + q, keep) : make_float4(mean, mean, mean, mean);
            }
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const float a = v[i].x - mean, c = v[i].y - mean, e = v[i].z - mean, f = v[i].w - mean;
                d = fmaf(a, a, d); d = fmaf(c, c, d); d = fmaf(e, e, d); d = fmaf(f, f, d);
            }
        }
        const float rstd = rsqrtf(block_sum(d, part + NWARPS) / (float)cols + LN_EPS);
#else
        Moments mine{0.0f, 0.0f, 0.0f};
        for (int q0 = tid; q0 < n4; q0 += U * BLOCK) {
            float4 v[U];
            int held = 0;
#pragma unroll
            for (int i = 0; i < U; ++i) {  // all U loads issued before any is used
                const int q = q0 + i * BLOCK;
                v[i] = q < n4 ? load_hinted(x4 + q, keep) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                held += q < n4;  // the slots in the row come first
            }
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < U; ++i)
                s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
            const float n = 4.0f * held, m = s / n;
            float m2 = 0.0f;
#pragma unroll
            for (int i = 0; i < U; ++i) {
                if (i < held) {
                    const float a = v[i].x - m, c = v[i].y - m, d = v[i].z - m, e = v[i].w - m;
                    m2 = fmaf(a, a, m2); m2 = fmaf(c, c, m2); m2 = fmaf(d, d, m2); m2 = fmaf(e, e, m2);
                }
            }
            mine = merge(mine, Moments{n, m, m2});
        }
        const Moments total = block_merge(mine, part);
        const float mean = total.mean, rstd = rsqrtf(total.m2 / (float)cols + LN_EPS);
#endif
        for (int q0 = tid; q0 < n4; q0 += U * BLOCK) {
            float4 v[U], w[U], b[U];
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const int q = q0 + i * BLOCK;
                if (q < n4) {
                    v[i] = load_hinted(x4 + q, drop);
                    w[i] = load_hinted(w4 + q, keep);  // shared by every row: stays in L2
                    b[i] = load_hinted(b4 + q, keep);
                }
            }
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const int q = q0 + i * BLOCK;
                if (q < n4)
                    y4[q] = make_float4(fmaf((v[i].x - mean) * rstd, w[i].x, b[i].x),
                                        fmaf((v[i].y - mean) * rstd, w[i].y, b[i].y),
                                        fmaf((v[i].z - mean) * rstd, w[i].z, b[i].z),
                                        fmaf((v[i].w - mean) * rstd, w[i].w, b[i].w));
            }
        }
        return;
    }

    // Any size: each thread's moments over its strided elements (two passes from global
    // memory, the second mostly L2 hits), one merge, then the output pass.
    float s = 0.0f;
    int held = 0;
    for (int c = tid; c < cols; c += BLOCK) {
        s += xr[c];
        ++held;
    }
    const float mean_t = held ? s / (float)held : 0.0f;
    float m2 = 0.0f;
    for (int c = tid; c < cols; c += BLOCK) {
        const float a = xr[c] - mean_t;
        m2 = fmaf(a, a, m2);
    }
    const Moments total = block_merge(Moments{(float)held, mean_t, m2}, part);
    const float mean = total.mean, rstd = rsqrtf(total.m2 / (float)cols + LN_EPS);
    for (int c = tid; c < cols; c += BLOCK)
        yr[c] = fmaf((xr[c] - mean) * rstd, weight[c], bias[c]);
}
