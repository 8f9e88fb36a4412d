// softmax_online: row-wise fp32 softmax for rows of any length, one thread block
// per row, x read from DRAM once: the row is cached in dynamic shared memory up to
// CACHE floats, and what does not fit is folded into an online max/sum ("online
// softmax": m and s updated together, s rescaled by exp(m_old - m_new) when the
// max grows) and read a second time, from L2, only to write y.
//   y[r, c] = exp(x[r, c] - max_c x[r, :]) / sum_c exp(x[r, c] - max_c x[r, :])
//   x and y are rows x cols, row-major, densely packed. Any rows, cols >= 1.
//
// Launch rule:
//   block  = (BLOCK, 1, 1)
//   grid   = (rows, 1, 1)
//   shared = 4 * min(CACHE, round_up(cols, 4))   bytes of dynamic shared memory
//            (the kernel reads its own size from %dynamic_smem_size, so any
//            size is correct; this one caches min(CACHE, cols) floats).
//
// Why: rowblock.cu keeps a row in registers, 4*ITEMS*BLOCK floats at most
// (8192 with BLOCK=256, ITEMS=8). A 50257-float row (201 KB) does not fit, and
// rowblock re-reads the rest in each of its three steps: 39% of the speed-of-
// light floor. Shared memory holds 227 KB per block on sm_90, so CACHE=57344
// holds the whole row (one block per SM); CACHE=28672 holds half of it with two
// blocks per SM, whose phases (read, reduce, write) then overlap, and the other
// half is re-read once from L2 (few MB in flight, far below the 50 MB L2).
// CACHE=0 is the pure online softmax: two reads of x (the second mostly L2
// hits), one write of y, no shared memory beyond the reduction scratch.
//
// Decomposition, per row (block):
//   units    float4s of the 16-byte-aligned body of the row (VEC path), or single
//            floats (scalar path); unit u belongs to thread u % BLOCK in every
//            pass, so a thread only ever reads back the cache slots it wrote and
//            the passes need no barrier except the block reductions.
//   VEC path (x and y equally aligned mod 16, always true for the harness's
//            256-byte-aligned buffers): the 0-3 elements before the first
//            aligned float4 (head) and the 0-3 after the last (tail) are held in
//            registers by threads 0-2, so a row with cols % 4 != 0 (50257) still
//            moves float4s. Otherwise the scalar path caches single floats.
//   pass 1   read x; cached units go to shared memory (streaming loads: never
//            needed from L2 again); uncached units (u >= capacity) update the
//            thread's online (m, s) with default loads (kept in L2 for pass 3).
//            ONLINE=1 folds the cached units into (m, s) too; ONLINE=0 takes
//            only their max, and pass 2 turns them into exp(v - m) in place and
//            sums them (one expf per cached element instead of two, one extra
//            pass over shared memory and one more block reduction).
//   reduce   M = block max of m; S = block sum of s * exp(m - M) (+ pass 2's sum).
//   pass 3   y = exp(x - M) / S (cached units from shared memory, the rest
//            re-read from global with last-use loads); streaming stores.
//
// Knob constraints: BLOCK a multiple of 32 in [32, 1024]; UNROLL >= 1 (loads in
// flight per thread in the streaming loops). CACHE above what the GPU allows per
// block (232448 bytes on sm_90) is a launch error, reported as such.
//
// Accuracy: expf (not __expf), fp32 sums, one reciprocal per row.

// knob BLOCK: 256 512 1024
#ifndef BLOCK
#define BLOCK 1024
#endif

// knob CACHE: 0 4096 8192 18432 28672 57344
#ifndef CACHE
#define CACHE 28672
#endif

// knob UNROLL: 1 2 4
#ifndef UNROLL
#define UNROLL 4
#endif

// knob ONLINE: 0 1
#ifndef ONLINE
#define ONLINE 0
#endif

#define NWARPS (BLOCK / 32)

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024,
              "BLOCK must be a multiple of 32 in [32, 1024]");
static_assert(UNROLL >= 1, "UNROLL must be at least 1");
static_assert(CACHE >= 0 && CACHE % 4 == 0, "CACHE must be a non-negative multiple of 4");

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

// Every warp reduces all NWARPS partials itself, so every thread gets the result
// with no broadcast slot; the trailing barrier keeps the next call from
// overwriting red[] while a slow warp still reads it.
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

// The unit helpers, for float4 (VEC path) and float (scalar path).
__device__ __forceinline__ float umax(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ __forceinline__ float umax(float v) { return v; }

__device__ __forceinline__ float uexp_sum(float4 v, float m)
{
    return (expf(v.x - m) + expf(v.y - m)) + (expf(v.z - m) + expf(v.w - m));
}
__device__ __forceinline__ float uexp_sum(float v, float m) { return expf(v - m); }

__device__ __forceinline__ float4 uexp(float4 v, float m)
{
    return make_float4(expf(v.x - m), expf(v.y - m), expf(v.z - m), expf(v.w - m));
}
__device__ __forceinline__ float uexp(float v, float m) { return expf(v - m); }

__device__ __forceinline__ float usum(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ __forceinline__ float usum(float v) { return v; }

__device__ __forceinline__ float4 uscale(float4 v, float a) { return make_float4(v.x * a, v.y * a, v.z * a, v.w * a); }
__device__ __forceinline__ float uscale(float v, float a) { return v * a; }

// Online update of (m, s) with one unit: s is rescaled only when the max grows
// (m = -inf at first: s = 0 * exp(-inf) = 0).
template <typename V>
__device__ __forceinline__ void online(V v, float& m, float& s)
{
    const float mu = umax(v);
    if (mu > m) {
        s *= expf(m - mu);
        m = mu;
    }
    s += uexp_sum(v, m);
}

// One row. V = float4: `body` points at the first 16-byte-aligned float4 of the
// row and n units follow; the `odd` elements (head and tail, at most 6, -inf when
// absent) are in registers of threads 0-2. V = float: the whole row is the body.
template <typename V>
__device__ __forceinline__ void softmax_row(const V* __restrict__ xb, V* __restrict__ yb, int n,
                                            const float* __restrict__ xr, float* __restrict__ yr,
                                            int head, int tail0, int cols, float* red, V* cache)
{
    const float NEG_INF = __int_as_float(0xff800000);
    const int tid = threadIdx.x;
    unsigned int smem_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_bytes));
    const int cap = min(n, (int)(smem_bytes / sizeof(V)));   // cached units

    // Odd elements: thread t < 3 owns head element t and tail element tail0 + t.
    float oh = NEG_INF, ot = NEG_INF;
    if (tid < head) oh = xr[tid];
    if (tail0 + tid < cols && tid < 3) ot = xr[tail0 + tid];

    float m = fmaxf(oh, ot);   // max of what is cached (registers, shared memory)
    float s = 0.0f;            // ONLINE=1: sum of exp(cached - m)
    float mt = NEG_INF;        // online max / sum of the uncached units
    float st = 0.0f;

    // ---- pass 1: read x once ----
    int u = tid;
    for (; u + (UNROLL - 1) * BLOCK < cap; u += UNROLL * BLOCK) {
        V v[UNROLL];
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) v[i] = __ldcs(xb + u + i * BLOCK);
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) {
            cache[u + i * BLOCK] = v[i];
            if (ONLINE) online(v[i], m, s);
            else m = fmaxf(m, umax(v[i]));
        }
    }
    for (; u < cap; u += BLOCK) {
        const V v = __ldcs(xb + u);
        cache[u] = v;
        if (ONLINE) online(v, m, s);
        else m = fmaxf(m, umax(v));
    }
    // Uncached units start at the first u >= cap of this thread's sequence.
    u = cap + ((tid - cap % BLOCK) + BLOCK) % BLOCK;
    const int first_uncached = u;
    for (; u + (UNROLL - 1) * BLOCK < n; u += UNROLL * BLOCK) {
        V v[UNROLL];
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) v[i] = __ldg(xb + u + i * BLOCK);
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) online(v[i], mt, st);
    }
    for (; u < n; u += BLOCK) online(__ldg(xb + u), mt, st);

    // ---- reduce: the row max, then the sum of exponentials ----
    const float M = block_max(fmaxf(m, mt), red);   // finite: every row has >= 1 element
    oh = expf(oh - M);                               // -inf (absent) becomes 0
    ot = expf(ot - M);
    float sum = oh + ot + st * expf(mt - M);
    if (ONLINE) {
        sum += s * expf(m - M);
    } else {
        // pass 2: exponentials of the cached units, in place, and their sum.
        for (int w = tid; w < cap; w += BLOCK) {
            const V e = uexp(cache[w], M);
            cache[w] = e;
            sum += usum(e);
        }
    }
    const float inv = 1.0f / block_sum(sum, red);

    // ---- pass 3: write y once ----
    if (tid < head) yr[tid] = oh * inv;
    if (tail0 + tid < cols && tid < 3) yr[tail0 + tid] = ot * inv;
    for (int w = tid; w < cap; w += BLOCK)
        __stcs(yb + w, ONLINE ? uscale(uexp(cache[w], M), inv) : uscale(cache[w], inv));
    u = first_uncached;
    for (; u + (UNROLL - 1) * BLOCK < n; u += UNROLL * BLOCK) {
        V v[UNROLL];
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) v[i] = __ldlu(xb + u + i * BLOCK);
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) __stcs(yb + u + i * BLOCK, uscale(uexp(v[i], M), inv));
    }
    for (; u < n; u += BLOCK) __stcs(yb + u, uscale(uexp(__ldlu(xb + u), M), inv));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_online(const float* __restrict__ x,
               float* __restrict__ y,
               int rows, int cols)
{
    __shared__ float red[NWARPS];
    extern __shared__ float4 cache4[];

    const int row = blockIdx.x;
    if (row >= rows) return;                    // uniform per block: no barrier is skipped

    // size_t: rows * cols can pass 2^31 (4096 x 50257 floats).
    const size_t base = (size_t)row * (size_t)cols;
    const float* xr = x + base;
    float* yr = y + base;

    // float4 body when x and y rows share their alignment mod 16 (uniform per
    // launch, so no divergence); head = elements before the first aligned float4.
    const unsigned long long ax = reinterpret_cast<unsigned long long>(xr);
    const unsigned long long ay = reinterpret_cast<unsigned long long>(yr);
    if (((ax ^ ay) & 15ull) == 0 && (ax & 3ull) == 0) {
        const int head = min(cols, (int)(((16 - (ax & 15ull)) & 15ull) >> 2));
        const int n4 = (cols - head) >> 2;
        softmax_row<float4>(reinterpret_cast<const float4*>(xr + head), reinterpret_cast<float4*>(yr + head),
                            n4, xr, yr, head, head + 4 * n4, cols, red, cache4);
    } else {
        softmax_row<float>(xr, yr, cols, xr, yr, 0, cols, cols, red, reinterpret_cast<float*>(cache4));
    }
}
