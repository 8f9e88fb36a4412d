// layernorm_welford: row-wise fp32 layer norm, one thread block per row, the row
// held in registers as float4s and reduced once: each thread's (count, mean, M2),
// merged across the block by Chan's formula, gives mean and variance together.
//   mean = sum_c x[r, c] / cols,  var = sum_c (x[r, c] - mean)^2 / cols
//   y[r, c] = (x[r, c] - mean) * rsqrt(var + 1e-5) * weight[c] + bias[c]
//   x and y are rows x cols, row-major, densely packed; weight, bias have cols
//   elements. Any rows, cols >= 1.
//
// Launch rule:
//   block  = (BLOCK, 1, 1)
//   grid   = (rows, 1, 1)
//   shared = 0   (static: 3 * BLOCK/32 floats of partials)
//
// Why: rowblock.cu reduces twice per row (the sum, then the squared deviations),
// four block barriers in all, and on the H200 it ran at 0.97-0.98x torch.compile.
// Here every thread first makes its own exact two-pass (mean, M2) over
// the values it holds (registers, no memory traffic), the warp merges those by
// shuffles, and one barrier exchanges the warps' partials; every thread then merges
// the NWARPS partials itself, in the same order, so all agree bit for bit and no
// broadcast barrier follows. Chan's merge is exact in real arithmetic and well
// conditioned in fp32 (no E[x^2] - mean^2 cancellation). x loads and y stores may be
// evict-first (HINT: neither is read again); weight and bias (shared by every row,
// L2-resident) may be loaded before the barrier so their latency hides behind it
// (WPRE).
//
// Path (uniform per launch): cols % 4 == 0, 16-byte aligned x, y, weight, bias and a
// row of at most ITEMS * BLOCK float4s take the register path; anything else (ragged
// cols, longer rows) takes a scalar loop that re-reads the row from global memory
// (mostly L2 hits), correct for any size.

// knob BLOCK: 128 256 512 1024
#ifndef BLOCK
#define BLOCK 256
#endif

// knob ITEMS: 1 2 4 8
#ifndef ITEMS
#define ITEMS 8
#endif

// The evict-first hint (__ldcs / __stcs) on x's loads and y's stores (1), neither (0), the
// loads only (2) or the stores only (3)
// knob HINT: 0 2 1 3
#ifndef HINT
#define HINT 1
#endif

// An L2 prefetch-size hint on x's loads: none (0), 128 bytes (1) or 256 bytes (2) (PTX's
// .L2::128B / .L2::256B: the L2 fetches the whole span around a load from DRAM at once).
// Torch.compile's Triton kernel ran 0.3-0.5% faster than welford on an H100;
// the hint is one difference a Triton load does not have, measured rather than assumed.
// knob PF: 0 1 2
#ifndef PF
#define PF 0
#endif

#if PF == 1
#define PF_SIZE ".L2::128B"
#elif PF == 2
#define PF_SIZE ".L2::256B"
#endif

// knob WPRE: 0 1
#ifndef WPRE
#define WPRE 0
#endif

#if WPRE && ITEMS > 4
#error "WPRE holds weight and bias beside the row: 3 * 4 * ITEMS floats per thread spill past ITEMS = 4"
#endif

#define NWARPS (BLOCK / 32)
#define LN_EPS 1e-5f
// Blocks per SM ptxas must fit (its register cap): 1536 threads (42 registers) when a
// thread holds at most 8 floats, 1024 (64) when it holds more, or weight and bias too
// (WPRE at ITEMS = 2 spilled under 42).
#define OCC_THREADS (ITEMS <= 2 && !WPRE ? 1536 : 1024)
#define MIN_BLOCKS (OCC_THREADS / BLOCK > 1 ? OCC_THREADS / BLOCK : 1)

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

__device__ __forceinline__ float4 load_x(const float4* p)
{
#if PF && (HINT == 1 || HINT == 2)
    float4 v;  // not volatile: x is never written while the kernel runs, so loads may move
    asm("ld.global.cs" PF_SIZE ".v4.f32 {%0, %1, %2, %3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
#elif PF
    float4 v;
    asm("ld.global" PF_SIZE ".v4.f32 {%0, %1, %2, %3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
#elif HINT == 1 || HINT == 2
    return __ldcs(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ void store_y(float4* p, const float4& v)
{
#if HINT == 1 || HINT == 3
    __stcs(p, v);
#else
    *p = v;
#endif
}

__device__ __forceinline__ float4 affine(const float4& v, float mean, float rstd, const float4& w, const float4& b)
{
    return make_float4(fmaf((v.x - mean) * rstd, w.x, b.x), fmaf((v.y - mean) * rstd, w.y, b.y),
                       fmaf((v.z - mean) * rstd, w.z, b.z), fmaf((v.w - mean) * rstd, w.w, b.w));
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
layernorm_welford(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
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
    const int n4 = cols >> 2;
    const bool vec = (cols & 3) == 0 && n4 <= ITEMS * BLOCK
        && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(weight)
             | reinterpret_cast<size_t>(bias)) & 15) == 0;

    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(weight);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        float4* y4 = reinterpret_cast<float4*>(yr);
        float4 v[ITEMS];
        int held = 0;  // float4s this thread holds: its slots i with i * BLOCK + tid < n4 come first
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int q = i * BLOCK + tid;
            v[i] = q < n4 ? load_x(x4 + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            held += q < n4;
            s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        }
#if WPRE
        float4 w[ITEMS], b[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int q = i * BLOCK + tid;
            w[i] = q < n4 ? __ldg(w4 + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            b[i] = q < n4 ? __ldg(b4 + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#endif
        // This thread's exact two-pass moments over what it holds.
        const float n = 4.0f * held;
        const float mean_t = held ? s / n : 0.0f;
        float m2 = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            if (i < held) {
                const float a = v[i].x - mean_t, c = v[i].y - mean_t, d = v[i].z - mean_t, e = v[i].w - mean_t;
                m2 = fmaf(a, a, m2); m2 = fmaf(c, c, m2); m2 = fmaf(d, d, m2); m2 = fmaf(e, e, m2);
            }
        }
        const Moments total = block_merge(Moments{n, mean_t, m2}, part);
        const float mean = total.mean, rstd = rsqrtf(total.m2 / (float)cols + LN_EPS);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int q = i * BLOCK + tid;
            if (q < n4) {
#if WPRE
                store_y(y4 + q, affine(v[i], mean, rstd, w[i], b[i]));
#else
                store_y(y4 + q, affine(v[i], mean, rstd, __ldg(w4 + q), __ldg(b4 + q)));
#endif
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
