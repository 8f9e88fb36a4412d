// layernorm_rows: row-wise fp32 layer norm, one thread block per row, the row
// read from DRAM once.
//   mean = sum_c x[r, c] / cols,  var = sum_c (x[r, c] - mean)^2 / cols
//   y[r, c] = (x[r, c] - mean) * rsqrt(var + 1e-5) * weight[c] + bias[c]
//   x and y are rows x cols, row-major, densely packed; weight, bias have cols
//   elements. Any rows, cols >= 1.
//
// Launch rule:
//   block  = (BLOCK, 1, 1)
//   grid   = (rows, 1, 1)
//   shared = 0   (static: BLOCK/32 floats of reduction scratch)
//
// Layer norm moves 8 bytes per element (weight and bias are shared by every row
// and stay in L2), so the only thing that matters is DRAM traffic: read x once,
// write y once. Each thread therefore keeps up to 4*ITEMS elements of its row
// in registers (the "cache") across the three steps (mean, variance, normalize),
// and the block cooperates on one row so the reductions stay on chip (warp
// shuffles, then BLOCK/32 partials through shared memory).
//
// The variance is the mean of squared deviations from the mean, computed from
// the cached values after the mean is known (two passes, free since the row is
// in registers), not E[x^2] - mean^2, which cancels badly in fp32.
//
// Which thread holds what (coalesced in both paths):
//   float4 path (cols % 4 == 0 and x, weight, bias, y 16-byte aligned, so every
//   row start is 16-byte aligned too): cache slot i of thread t holds float4
//   number q = i*BLOCK + t of the row, i.e. elements 4q..4q+3.
//   scalar path (otherwise): cache slot k of thread t holds element k*BLOCK + t.
// Either way the cache covers elements [0, 4*ITEMS*BLOCK). Longer rows (8192
// with BLOCK*ITEMS < 2048, 50257 always) are still correct: the elements past
// the cache are re-read from global memory in each step, which mostly hits L2.
// Slots past the row end hold 0 and are skipped by the variance and the stores.
// The loops over the part past the cache are kept rolled ("unroll 1"): unrolled
// next to the live cache they spilled (ITEMS <= 2 under 42 registers, ITEMS = 8
// under 64), and they only run for rows longer than the cache, a tuning miss.

// knob BLOCK: 128 256 512 1024
#ifndef BLOCK
#define BLOCK 256
#endif

// knob ITEMS: 1 2 4 8
#ifndef ITEMS
#define ITEMS 4
#endif

#define NWARPS (BLOCK / 32)
#define LN_EPS 1e-5f

// Blocks per multiprocessor that ptxas must fit, i.e. a register cap of
// 65536 / (BLOCK * MIN_BLOCKS): 42 (75% occupancy) for ITEMS <= 2, 64 (50%)
// for ITEMS >= 4, whose 16 or 32 cached floats need it. Without it ptxas picks
// its own occupancy target per BLOCK, which can spill or take far more
// registers than the kernel needs.
#define OCC_THREADS (ITEMS <= 2 ? 1536 : 1024)
#define MIN_BLOCKS (OCC_THREADS / BLOCK > 1 ? OCC_THREADS / BLOCK : 1)

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024,
              "BLOCK must be a multiple of 32 in [32, 1024]");
static_assert(ITEMS >= 1, "ITEMS must be at least 1");

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every warp reduces all NWARPS partials itself, so every thread ends up with
// the block's result without a broadcast slot and a third barrier. The barrier
// at the end keeps the next call from overwriting red[] while a slow warp is
// still reading it.
__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int lane = threadIdx.x & 31;
    v = warp_sum(v);
    if (lane == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = lane < NWARPS ? red[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

// One row, with the path fixed at compile time: the float4 and scalar paths
// are separate code, so ptxas allocates registers for each alone (fused into
// one body, their union spills at ITEMS = 8 under a 64-register cap).
template <bool VEC>
__device__ __forceinline__ void layernorm_row(const float* __restrict__ xr,
                                              const float* __restrict__ weight,
                                              const float* __restrict__ bias,
                                              float* __restrict__ yr,
                                              int cols, float* red)
{
    constexpr int SLOTS = 4 * ITEMS;            // floats cached per thread
    constexpr int CACHED = SLOTS * BLOCK;       // elements of a row held in registers
    const int tid = threadIdx.x;
    const int n4 = cols >> 2;                   // float4s in the row (VEC: cols % 4 == 0)
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
    const float4* __restrict__ w4 = reinterpret_cast<const float4*>(weight);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(bias);
    float4* __restrict__ y4 = reinterpret_cast<float4*>(yr);
    const float inv_cols = 1.0f / (float)cols;

    float v[SLOTS];

    // ---- step 1: load the row (once) and sum it ----
    float s = 0.0f;
    if (VEC) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int q = i * BLOCK + tid;
            float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (q < n4) t = x4[q];
            v[4 * i + 0] = t.x; v[4 * i + 1] = t.y; v[4 * i + 2] = t.z; v[4 * i + 3] = t.w;
            s += (t.x + t.y) + (t.z + t.w);
        }
#pragma unroll 1
        for (int q = ITEMS * BLOCK + tid; q < n4; q += BLOCK) {
            const float4 t = x4[q];
            s += (t.x + t.y) + (t.z + t.w);
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLOTS; ++k) {
            const int e = k * BLOCK + tid;
            v[k] = e < cols ? xr[e] : 0.0f;
            s += v[k];
        }
#pragma unroll 1
        for (int e = CACHED + tid; e < cols; e += BLOCK) s += xr[e];
    }
    const float mean = block_sum(s, red) * inv_cols;

    // ---- step 2: variance from the cached values (deviations kept) ----
    float d = 0.0f;
    if (VEC) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            if (i * BLOCK + tid < n4) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    v[4 * i + j] -= mean;
                    d = fmaf(v[4 * i + j], v[4 * i + j], d);
                }
            }
        }
#pragma unroll 1
        for (int q = ITEMS * BLOCK + tid; q < n4; q += BLOCK) {
            const float4 t = x4[q];
            const float a = t.x - mean, b = t.y - mean, c = t.z - mean, e = t.w - mean;
            d = fmaf(a, a, d); d = fmaf(b, b, d); d = fmaf(c, c, d); d = fmaf(e, e, d);
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLOTS; ++k) {
            if (k * BLOCK + tid < cols) {
                v[k] -= mean;
                d = fmaf(v[k], v[k], d);
            }
        }
#pragma unroll 1
        for (int e = CACHED + tid; e < cols; e += BLOCK) {
            const float a = xr[e] - mean;
            d = fmaf(a, a, d);
        }
    }
    const float rstd = rsqrtf(block_sum(d, red) * inv_cols + LN_EPS);

    // ---- step 3: normalize, scale, shift, store ----
    if (VEC) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int q = i * BLOCK + tid;
            if (q < n4) {
                const float4 w = w4[q], b = b4[q];
                y4[q] = make_float4(fmaf(v[4 * i + 0] * rstd, w.x, b.x),
                                    fmaf(v[4 * i + 1] * rstd, w.y, b.y),
                                    fmaf(v[4 * i + 2] * rstd, w.z, b.z),
                                    fmaf(v[4 * i + 3] * rstd, w.w, b.w));
            }
        }
#pragma unroll 1
        for (int q = ITEMS * BLOCK + tid; q < n4; q += BLOCK) {
            const float4 t = x4[q], w = w4[q], b = b4[q];
            y4[q] = make_float4(fmaf((t.x - mean) * rstd, w.x, b.x),
                                fmaf((t.y - mean) * rstd, w.y, b.y),
                                fmaf((t.z - mean) * rstd, w.z, b.z),
                                fmaf((t.w - mean) * rstd, w.w, b.w));
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLOTS; ++k) {
            const int e = k * BLOCK + tid;
            if (e < cols) yr[e] = fmaf(v[k] * rstd, weight[e], bias[e]);
        }
#pragma unroll 1
        for (int e = CACHED + tid; e < cols; e += BLOCK)
            yr[e] = fmaf((xr[e] - mean) * rstd, weight[e], bias[e]);
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
layernorm_rows(const float* __restrict__ x,
               const float* __restrict__ weight,
               const float* __restrict__ bias,
               float* __restrict__ y,
               int rows, int cols)
{
    __shared__ float red[NWARPS];

    const int row = blockIdx.x;
    if (row >= rows) return;                    // uniform per block: no barrier is skipped

    // size_t: rows * cols can pass 2^31.
    const size_t base = (size_t)row * (size_t)cols;

    // float4 only when every row start (and weight, bias) is 16-byte aligned.
    // Uniform per launch, so no divergence.
    const bool vec = ((cols & 3) == 0) &&
                     (((reinterpret_cast<unsigned long long>(x) |
                        reinterpret_cast<unsigned long long>(weight) |
                        reinterpret_cast<unsigned long long>(bias) |
                        reinterpret_cast<unsigned long long>(y)) & 15ull) == 0);
    if (vec)
        layernorm_row<true>(x + base, weight, bias, y + base, cols, red);
    else
        layernorm_row<false>(x + base, weight, bias, y + base, cols, red);
}
