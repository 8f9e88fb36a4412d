// softmax_l2pipe: row-wise fp32 softmax, l2pass's two passes over each row pipelined
// across rows: a persistent block reads row k + 1 from DRAM (folding it into a running
// (max, sum)) in the same loop that re-reads row k from L2 and writes it, so every SM
// keeps DRAM reads and writes in flight all the time instead of alternating.
//   y[r, c] = exp(x[r, c] - M) / S, M = max_c x[r, c], S = sum_c exp(x[r, c] - M)
//   x and y are rows x cols, row-major, densely packed. Any rows, cols >= 1.
//
// Launch rule (a program of one step, for its `cluster`):
//   grid    = (CL * min(ceil_div(rows, CL), max(1, SMS * BPS // CL)), 1, 1), persistent
//   cluster = (CL, 1, 1), block = (BLOCK, 1, 1), shared = 0 (static: 2 * BLOCK/32 pairs)
//   args    x, y, rows, cols
//
// Why: l2pass (82% of the floor on 4096 x 50257 on the H200) has each block read its
// row (DRAM reads only), reduce, then re-read it from L2 and write (DRAM writes only);
// two blocks per SM at random phases mix the streams only on average, and the L2 holds
// a whole row per block at the turn. Here a block's loop over row k's float4s also
// issues row k + 1's loads: the mix is even on every SM at every moment, the row just
// read in is the only one live in L2 per block (132 x 201 KB = 26 MB at one block per
// SM; BPS = 2 doubles it, past half the L2, so long rows want BPS = 1), and the only
// bubble is one block reduction per row, with the first batch of the row after next
// already in flight across it. Row k + 1's loads run a batch ahead of the fold (two
// batches of U float4s per thread in flight), and the head/tail element is folded after
// the loop, so no warp waits on a scalar load before its first batch.
//
// Which rows: G = gridDim.x blocks. Block g does rows g, g + G, ... below RM = (rows / G)
// * G, one whole row at a time, pipelined (the main phase). The last rows % G rows (a
// partial wave: 4096 rows over 132 blocks leaves 4) are split over a cluster's CL blocks
// (the tail phase: l2pass's body, rank k owns a CL-th of the row, the (max, sum) pairs
// exchanged through distributed shared memory), so with CL = 4 the partial wave costs a
// quarter of a row's time instead of a whole one. CL = 1: the tail rows go one per block.
//
// Row geometry (base b = r * cols, an element offset): head = min(cols, elements before
// the row's first 16-byte-aligned address) (0-3), NV = (cols - head) / 4 aligned float4s
// (the body), tail = cols - head - 4 NV (0-3). Thread t reads body float4s t + j * BLOCK;
// head element t goes to thread t, tail element t to thread 3 + t (rank 0's in the tail
// phase), held in a register from the row's read to its write. y takes float4 stores when
// its address has x's alignment mod 16, four scalar stores otherwise (uniform per launch).
//
// Accuracy: expf (not __expf), fp32 throughout; y = expf(x - M) * (1 / S).

// blocks per cluster: how many share a tail row
// knob CL: 1 2 4
#ifndef CL
#define CL 1
#endif

// knob BLOCK: 256 512 1024
#ifndef BLOCK
#define BLOCK 1024
#endif

// float4 loads per thread in a batch; the loop keeps two batches of row k + 1 in flight
// knob U: 2 4 1
#ifndef U
#define U 2
#endif

// blocks per SM: the persistent grid's size, and the launch bound that makes them fit
// knob BPS: 1 2 4
#ifndef BPS
#define BPS 1
#endif

// the SMs the persistent grid fills (launch rule only): all of the H200's, or 128 so that
// clusters of 2 or 4 tile the GPCs
// knob SMS: 132 128
#ifndef SMS
#define SMS 132
#endif

// Row k + 1's loads with an L2 evict_last policy (1) or plain loads (0).
// knob HINT: 0 1
#ifndef HINT
#define HINT 1
#endif

// Three batches are live in the loop (12 U registers): ptxas fits them without spilling
// in 64 registers (1024 threads per SM) for U <= 2, in 128 (512 threads) for U = 4.
#if BLOCK * BPS > 1024 || (U > 2 && BLOCK * BPS > 512)
#error "BLOCK * BPS threads per SM leave too few registers for U: the loop would spill"
#endif

#define NWARPS (BLOCK / 32)

static_assert(BLOCK % 32 == 0 && BLOCK >= 64 && BLOCK <= 1024, "BLOCK must be a multiple of 32 in [64, 1024]");
static_assert(CL >= 1 && CL <= 8, "CL must be 1..8 (a portable cluster)");
static_assert(U >= 1 && BPS >= 1, "U and BPS must be positive");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync()
{
#if CL > 1
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
    __syncthreads();
#endif
}

// Pair `local_addr` of cluster block `rank` (C = 1: of this block, no cluster involved).
template <int C>
__device__ __forceinline__ float2 load_pair(unsigned local_addr, unsigned rank)
{
    float a, b;
    if (C > 1) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local_addr), "r"(rank));
        asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(a), "=f"(b) : "r"(remote) : "memory");
    } else {
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(a), "=f"(b) : "r"(local_addr) : "memory");
    }
    return make_float2(a, b);
}

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

__device__ __forceinline__ float4 load_first(const float4* p, unsigned long long policy)
{
#if HINT
    float4 v;
    asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
    return v;
#else
    (void)policy;
    return *p;
#endif
}

// Fold values into the running (m, s): s = sum exp(v - m) over everything folded.
// Values may be -inf (empty slots); m stays -inf (and s 0) until a finite value comes.
__device__ __forceinline__ void fold(float& m, float& s, const float* v, int n)
{
    float bm = m;
    for (int i = 0; i < n; ++i) bm = fmaxf(bm, v[i]);
    if (bm == neg_inf()) return;  // nothing yet
    float acc = s * expf(m - bm);  // m = -inf: expf(-inf) = 0, s = 0
    for (int i = 0; i < n; ++i) acc += expf(v[i] - bm);
    m = bm;
    s = acc;
}

// Float4s q, q + BLOCK, ..., q + (U - 1) BLOCK of xv, -inf past `end`.
__device__ __forceinline__ void load_batch(float4 (&t)[U], const float4* xv, int q, int end,
                                           unsigned long long policy)
{
    const float NI = neg_inf();
#pragma unroll
    for (int j = 0; j < U; ++j)
        t[j] = q + j * BLOCK < end ? load_first(xv + q + j * BLOCK, policy) : make_float4(NI, NI, NI, NI);
}

__device__ __forceinline__ void fold_batch(float& m, float& s, const float4 (&t)[U])
{
    float v[4 * U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
        v[4 * j] = t[j].x; v[4 * j + 1] = t[j].y; v[4 * j + 2] = t[j].z; v[4 * j + 3] = t[j].w;
    }
    fold(m, s, v, 4 * U);
}

struct Row;
__device__ __forceinline__ Row row_at(const float* x, long long r, int cols);
__device__ __forceinline__ bool extra_of(const Row& w, int tid, size_t& off);

struct Row {
    size_t b;  // the row's first element
    int head, nv, tail;
};

__device__ __forceinline__ Row row_at(const float* x, long long r, int cols)
{
    Row w;
    w.b = (size_t)r * (size_t)cols;
    w.head = min(cols, (int)((4 - ((reinterpret_cast<size_t>(x + w.b) >> 2) & 3)) & 3));
    w.nv = (cols - w.head) >> 2;
    w.tail = cols - w.head - 4 * w.nv;
    return w;
}

// The head or tail element this thread holds for row w (threads 0-2 and 3-5), if any.
__device__ __forceinline__ bool extra_of(const Row& w, int tid, size_t& off)
{
    if (tid < 3 && tid < w.head) { off = w.b + tid; return true; }
    if (tid >= 3 && tid < 6 && tid - 3 < w.tail) { off = w.b + w.head + 4 * (size_t)w.nv + (tid - 3); return true; }
    return false;
}

// Row r's first batch for this thread into t, and its head/tail element (-inf if none).
__device__ __forceinline__ float prefetch(float4 (&t)[U], const float* x, long long r, int cols, int tid,
                                          unsigned long long policy)
{
    const Row w = row_at(x, r, cols);
    load_batch(t, reinterpret_cast<const float4*>(x + w.b + w.head), tid, w.nv, policy);
    size_t off = 0;
    return extra_of(w, tid, off) ? x[off] : neg_inf();
}

// Every pair of the cluster (C = 1: of the block) combined into the row's M and 1 / S.
// pr: this block's buffer for the row (double-buffered by the caller: the next row's
// barrier is what keeps a buffer alive until every reader is done with it).
template <int C>
__device__ __forceinline__ void combine(float m, float s, float2* pr, float& M, float& inv)
{
    const float NI = neg_inf();
    const int lane = threadIdx.x & 31;
    const float mw = warp_max(m);
    const float sw = warp_sum(mw == NI ? 0.0f : s * expf(m - mw));  // m = -inf: s = 0
    if (lane == 0) pr[threadIdx.x >> 5] = make_float2(mw, sw);
    if (C > 1) cluster_sync(); else __syncthreads();
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(pr));
    constexpr int npairs = C * NWARPS;
    float2 p[(npairs + 31) / 32];
    M = NI;
#pragma unroll
    for (int j = 0; j < (npairs + 31) / 32; ++j) {
        const int k = j * 32 + lane;
        p[j] = make_float2(NI, 0.0f);
        if (k < npairs) p[j] = load_pair<C>(base + 8u * (unsigned)(k % NWARPS), (unsigned)(k / NWARPS));
        M = fmaxf(M, p[j].x);
    }
    M = warp_max(M);  // finite: the row has an element, and inputs are finite
    float S = 0.0f;
#pragma unroll
    for (int j = 0; j < (npairs + 31) / 32; ++j) S += p[j].y > 0.0f ? p[j].y * expf(p[j].x - M) : 0.0f;
    inv = 1.0f / warp_sum(S);
}

__device__ __forceinline__ void put(float* y, bool yvec, size_t at, int q, float4 o)
{
    if (yvec) {
        __stcs(reinterpret_cast<float4*>(y + at) + q, o);
    } else {
        float* yp = y + at + 4 * (size_t)q;
        yp[0] = o.x; yp[1] = o.y; yp[2] = o.z; yp[3] = o.w;
    }
}

__device__ __forceinline__ float4 softmax4(float4 t, float M, float inv)
{
    return make_float4(expf(t.x - M) * inv, expf(t.y - M) * inv, expf(t.z - M) * inv, expf(t.w - M) * inv);
}

extern "C" __global__ void __launch_bounds__(BLOCK, BPS)
softmax_l2pipe(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    __shared__ float2 pairs[2][NWARPS];

    const float NI = neg_inf();
    const int tid = threadIdx.x;
    const long long G = gridDim.x;
    const long long n = (long long)rows / G;  // rows per block in the main phase
    const bool yvec = ((reinterpret_cast<size_t>(x) ^ reinterpret_cast<size_t>(y)) & 15) == 0;
    unsigned long long policy = 0;
#if HINT
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
#endif
    int par = 0;  // which pairs buffer the next row's reduction uses

    // ---- main phase: whole rows, row k + 1 read while row k is written ----
    if (n > 0) {
        // Row k + 1 (w: geometry, e: its head/tail element) is the one read in iteration k;
        // its first batch (tn) and element are loaded before the reduction of row k, so
        // they are in flight across it.
        Row w = row_at(x, blockIdx.x, cols);
        size_t eoff = 0;
        bool has_e = extra_of(w, tid, eoff);
        float e = has_e ? x[eoff] : NI;
        float4 tn[U];
#pragma unroll
        for (int j = 0; j < U; ++j) tn[j] = make_float4(NI, NI, NI, NI);  // n = 1: nothing to prefetch
        float en = NI;  // row k + 1's element (its geometry is recomputed: fewer live registers)
        float M, inv;
        {
            float m = NI, s = 0.0f;
            const float4* xv = reinterpret_cast<const float4*>(x + w.b + w.head);
            for (int q0 = tid; q0 < w.nv; q0 += U * BLOCK) {
                float4 t[U];
                load_batch(t, xv, q0, w.nv, policy);
                fold_batch(m, s, t);
            }
            fold(m, s, &e, 1);
            if (n > 1) en = prefetch(tn, x, blockIdx.x + G, cols, tid, policy);
            combine<1>(m, s, pairs[par], M, inv);
            par ^= 1;
        }
        for (long long k = 0; k < n; ++k) {
            const bool more = k + 1 < n;
            const Row c = w;  // row k: written now
            if (has_e) y[eoff] = expf(e - M) * inv;
            if (more) w = row_at(x, blockIdx.x + (k + 1) * G, cols);  // row k + 1: read now
            has_e = more && extra_of(w, tid, eoff);
            e = en;

            float m = NI, s = 0.0f;
            const float4* xc = reinterpret_cast<const float4*>(x + c.b + c.head);
            const float4* xn = reinterpret_cast<const float4*>(x + w.b + w.head);
            const size_t yat = c.b + c.head;
            const int nvn = more ? w.nv : 0;
            const int top = max(c.nv, nvn);
            // Row k + 1's loads run one batch ahead: batch i + 1 is issued before batch i is
            // folded, so two batches per thread are in flight while the loop computes. (A
            // thread that skips the loop had only -inf slots in tn.)
            for (int q0 = tid; q0 < top; q0 += U * BLOCK) {
                float4 tc[U], ta[U];
#pragma unroll
                for (int j = 0; j < U; ++j) {  // row k again, from L2, evict-first
                    const int q = q0 + j * BLOCK;
                    if (q < c.nv) tc[j] = __ldcs(xc + q);
                }
                load_batch(ta, xn, q0 + U * BLOCK, nvn, policy);
#pragma unroll
                for (int j = 0; j < U; ++j) {
                    const int q = q0 + j * BLOCK;
                    if (q < c.nv) put(y, yvec, yat, q, softmax4(tc[j], M, inv));
                }
                fold_batch(m, s, tn);
#pragma unroll
                for (int j = 0; j < U; ++j) tn[j] = ta[j];
            }
            fold(m, s, &e, 1);  // after the loop: its load's latency is behind the batches
            if (more) {
                // row k + 2's first batch and element, in flight across the reduction
                en = k + 2 < n ? prefetch(tn, x, blockIdx.x + (k + 2) * G, cols, tid, policy) : NI;
                combine<1>(m, s, pairs[par], M, inv);
                par ^= 1;
            }
        }
    }

    // ---- tail phase: the last partial wave, each row split over a cluster ----
    const unsigned rank = CL > 1 ? cluster_rank() : 0u;
    const long long nclusters = G / CL;
    for (long long r = n * G + blockIdx.x / CL; r < rows; r += nclusters) {
        const Row w = row_at(x, r, cols);
        const int per = (w.nv + CL - 1) / CL;
        const int lo = min(w.nv, (int)rank * per);
        const int hi = min(w.nv, lo + per);
        const float4* xv = reinterpret_cast<const float4*>(x + w.b + w.head);
        size_t eoff = 0;
        const bool has_e = rank == 0 && extra_of(w, tid, eoff);
        const float e = has_e ? x[eoff] : NI;

        float m = NI, s = 0.0f;
        for (int q0 = lo + tid; q0 < hi; q0 += U * BLOCK) {
            float4 t[U];
            load_batch(t, xv, q0, hi, policy);
            fold_batch(m, s, t);
        }
        fold(m, s, &e, 1);
        float M, inv;
        combine<CL>(m, s, pairs[par], M, inv);
        par ^= 1;

        if (has_e) y[eoff] = expf(e - M) * inv;
        const size_t yat = w.b + w.head;
        for (int q0 = lo + tid; q0 < hi; q0 += U * BLOCK) {
            float4 t[U];
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int q = q0 + j * BLOCK;
                if (q < hi) t[j] = __ldcs(xv + q);
            }
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int q = q0 + j * BLOCK;
                if (q < hi) put(y, yvec, yat, q, softmax4(t[j], M, inv));
            }
        }
    }
#if CL > 1
    cluster_sync();  // no block leaves while a partner may still read its pairs
#endif
}
