// softmax_rows: row-wise fp32 softmax, one thread block per row, the row read
// from DRAM once.
//   y[r, c] = exp(x[r, c] - max_c x[r, :]) / sum_c exp(x[r, c] - max_c x[r, :])
//   x and y are rows x cols, row-major, densely packed. Any rows, cols >= 1.
//
// Launch rule:
//   block  = (BLOCK, 1, 1)
//   grid   = (rows, 1, 1)
//   shared = 0   (static: BLOCK/32 floats of reduction scratch)
//
// Softmax moves 8 bytes per element and does a handful of flops on it, so the
// only thing that matters is DRAM traffic: read x once, write y once. Each
// thread therefore keeps up to 4*ITEMS elements of its row in registers (the
// "cache") across the three steps (max, sum of exponentials, scale), and the
// block cooperates on one row so the reductions stay on chip (warp shuffles,
// then BLOCK/32 partials through shared memory).
//
// Which thread holds what (coalesced in both paths):
//   float4 path (cols % 4 == 0 and x, y 16-byte aligned, so every row start is
//   16-byte aligned too): cache slot i of thread t holds float4 number
//   q = i*BLOCK + t of the row, i.e. elements 4q..4q+3.
//   scalar path (otherwise): cache slot k of thread t holds element k*BLOCK + t.
// Either way the cache covers elements [0, 4*ITEMS*BLOCK). Longer rows (50257
// is longer than even BLOCK=1024, ITEMS=8 holds) are still correct: the
// elements past the cache are re-read from global memory in each step, which
// mostly hits L2.
// Slots past the row end hold -inf, so exp() turns them into 0 in the sum;
// the stores are bounds-checked.
//
// Accuracy: expf (not __expf), fp32 sums, then one reciprocal per row and a
// multiply per element (about 1 ulp more than a division, far inside the
// tolerance, and no divide on the store path).

// knob BLOCK: 128 256 512 1024
#ifndef BLOCK
#define BLOCK 256
#endif

// knob ITEMS: 1 2 4 8
#ifndef ITEMS
#define ITEMS 4
#endif

#define NWARPS (BLOCK / 32)

// Blocks per multiprocessor that ptxas must fit, i.e. a register cap of
// 65536 / (BLOCK * MIN_BLOCKS): 42 (75% occupancy) for ITEMS <= 2, 64 (50%)
// for ITEMS >= 4, whose 16 or 32 cached floats need it. Without it ptxas picks
// its own occupancy target per BLOCK and spilled at some (BLOCK=512, ITEMS=4),
// or took 115 registers where 64 do.
#define OCC_THREADS (ITEMS <= 2 ? 1536 : 1024)
#define MIN_BLOCKS (OCC_THREADS / BLOCK > 1 ? OCC_THREADS / BLOCK : 1)

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024,
              "BLOCK must be a multiple of 32 in [32, 1024]");
static_assert(ITEMS >= 1, "ITEMS must be at least 1");

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every warp reduces all NWARPS partials itself, so every thread ends up with
// the block's result without a broadcast slot and a third barrier. The barrier
// at the end keeps a later call from overwriting red[] while a slow warp is
// still reading it.
__device__ __forceinline__ float block_max(float v, float* red)
{
    const int lane = threadIdx.x & 31;
    v = warp_max(v);
    if (lane == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = lane < NWARPS ? red[lane] : __int_as_float(0xff800000);
    v = warp_max(v);
    __syncthreads();
    return v;
}

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
// one body, their union spilled at ITEMS = 8 under the 64-register cap of
// BLOCK = 1024).
template <bool VEC>
__device__ __forceinline__ void softmax_row(const float* __restrict__ xr,
                                            float* __restrict__ yr,
                                            int cols, float* red)
{
    constexpr int SLOTS = 4 * ITEMS;            // floats cached per thread
    constexpr int CACHED = SLOTS * BLOCK;       // elements of a row held in registers
    const float NEG_INF = __int_as_float(0xff800000);
    const int tid = threadIdx.x;
    const int n4 = cols >> 2;                   // float4s in the row (VEC: cols % 4 == 0)
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(xr);
    float4* __restrict__ y4 = reinterpret_cast<float4*>(yr);

    float v[SLOTS];
    float m = NEG_INF;

    // ---- step 1: load the row (once) and take its max ----
    if (VEC) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int q = i * BLOCK + tid;
            float4 t = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            if (q < n4) t = x4[q];
            v[4 * i + 0] = t.x; v[4 * i + 1] = t.y; v[4 * i + 2] = t.z; v[4 * i + 3] = t.w;
            m = fmaxf(m, fmaxf(fmaxf(t.x, t.y), fmaxf(t.z, t.w)));
        }
        for (int q = ITEMS * BLOCK + tid; q < n4; q += BLOCK) {
            const float4 t = x4[q];
            m = fmaxf(m, fmaxf(fmaxf(t.x, t.y), fmaxf(t.z, t.w)));
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLOTS; ++k) {
            const int e = k * BLOCK + tid;
            v[k] = e < cols ? xr[e] : NEG_INF;
            m = fmaxf(m, v[k]);
        }
        for (int e = CACHED + tid; e < cols; e += BLOCK) m = fmaxf(m, xr[e]);
    }
    m = block_max(m, red);                      // finite: every row has >= 1 element

    // ---- step 2: exponentials (kept in the cache) and their sum ----
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
        v[k] = expf(v[k] - m);                  // -inf slots become 0
        s += v[k];
    }
    if (VEC) {
        for (int q = ITEMS * BLOCK + tid; q < n4; q += BLOCK) {
            const float4 t = x4[q];
            s += (expf(t.x - m) + expf(t.y - m)) + (expf(t.z - m) + expf(t.w - m));
        }
    } else {
        for (int e = CACHED + tid; e < cols; e += BLOCK) s += expf(xr[e] - m);
    }
    s = block_sum(s, red);
    const float inv = 1.0f / s;

    // ---- step 3: scale and store ----
    if (VEC) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int q = i * BLOCK + tid;
            if (q < n4)
                y4[q] = make_float4(v[4 * i + 0] * inv, v[4 * i + 1] * inv,
                                    v[4 * i + 2] * inv, v[4 * i + 3] * inv);
        }
        for (int q = ITEMS * BLOCK + tid; q < n4; q += BLOCK) {
            const float4 t = x4[q];
            y4[q] = make_float4(expf(t.x - m) * inv, expf(t.y - m) * inv,
                                expf(t.z - m) * inv, expf(t.w - m) * inv);
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLOTS; ++k) {
            const int e = k * BLOCK + tid;
            if (e < cols) yr[e] = v[k] * inv;
        }
        for (int e = CACHED + tid; e < cols; e += BLOCK) yr[e] = expf(xr[e] - m) * inv;
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
softmax_rows(const float* __restrict__ x,
             float* __restrict__ y,
             int rows, int cols)
{
    __shared__ float red[NWARPS];

    const int row = blockIdx.x;
    if (row >= rows) return;                    // uniform per block: no barrier is skipped

    // size_t: rows * cols can pass 2^31 (4096 x 50257 floats).
    const size_t base = (size_t)row * (size_t)cols;

    // float4 only when every row start is 16-byte aligned. Uniform per launch,
    // so no divergence.
    const bool vec = ((cols & 3) == 0) &&
                     (((reinterpret_cast<unsigned long long>(x) |
                        reinterpret_cast<unsigned long long>(y)) & 15ull) == 0);
    if (vec)
        softmax_row<true>(x + base, y + base, cols, red);
    else
        softmax_row<false>(x + base, y + base, cols, red);
}
