// softmax_clreg: row-wise fp32 softmax, a row split over a thread block cluster
// and held in registers; one DRAM read of x, one write of y, one expf per element.
//   y[r, c] = exp(x[r, c] - max_c x[r, :]) / sum_c exp(x[r, c] - max_c x[r, :])
//   x and y are rows x cols, row-major, densely packed. Any rows, cols >= 1.
//
// Launch rule (a program of one step, for its `cluster`):
//   grid    = (CL * ceil_div(rows, RPC), 1, 1), cluster = (CL, 1, 1), block = (BLOCK, 1, 1)
//   shared  = 0 (static: 2 * BLOCK/32 float2 pairs)
//   args    x, y, rows, cols
// Cluster c (blocks CL*c .. CL*c + CL-1) does rows [c*RPC, min(rows, c*RPC + RPC)).
// CL = 1 is one block per row group, no partner (barrier.cluster then spans one block).
//
// Why cluster.cu sits at ~68% of the floor on 4096 x 50257: per element it does a
// shared-memory store and two loads and two expf (the sum pass and the write pass
// each recompute exp), ~22 instructions, and its blocks on an SM start together and
// stay in step (read, reduce, cluster barrier, write), so that work does not overlap
// the DRAM traffic: ~0.15 ms of issue time on top of the 0.39 ms floor. Here:
//  - the slice stays in registers (no shared-memory round trip);
//  - each warp takes the exp of its elements against its own max m_w once, and its
//    sum s_w; the pair (m_w, s_w) is the only thing exchanged, and the output is
//    e * (exp(m_w - M) / S): one expf and one multiply per element;
//  - no __syncthreads: each warp publishes its pair in shared memory, one cluster
//    barrier (arrive.release / wait.acquire) makes every pair of the cluster visible,
//    and every warp combines all CL * BLOCK/32 pairs itself (ld.shared::cluster);
//    pairs are double-buffered by row parity, so the next row's barrier is what
//    keeps a pair alive until every partner has read it;
//  - PF = 1: a cluster owns RPC rows and issues the next row's loads before the
//    current row's reduction, barrier and stores, so DRAM stays busy while it
//    computes (two register buffers; PF = 0: one buffer, more blocks per SM).
//
// Which thread holds what, per row (base b = r * cols, an element offset):
//   head = min(cols, elements of the row before its first 16-byte-aligned address),
//   NV = (cols - head) / 4 aligned float4s (the body), tail = cols - head - 4 NV (0..3).
//   Body float4 q goes to slot i = q / (CL*BLOCK) of thread g = q % (CL*BLOCK),
//   g = rank * BLOCK + threadIdx.x: every warp instruction moves 512 contiguous bytes.
//   Slots past NV hold -inf. Head element t (t < head) is the extra scalar of rank 0's
//   thread t; tail element t is the extra scalar of rank 0's thread 3 + t.
//   A row longer than 4 * VEC * CL * BLOCK (knobs too small for cols) takes a slow
//   path instead, element by element from global memory, read three times. y takes float4 stores when its address has x's alignment mod 16, four
//   scalar stores otherwise (uniform per launch).
//
// Accuracy: expf (not __expf), fp32 throughout; y = exp(x - m_w) * (exp(m_w - M) / S).

// knob CL: 1 2 4 8
#ifndef CL
#define CL 8
#endif

// knob BLOCK: 128 256 512 1024
#ifndef BLOCK
#define BLOCK 256
#endif

// knob VEC: 1 2 4 5 6 7 8 12 16
#ifndef VEC
#define VEC 7
#endif

// knob RPC: 1 2 4 8 16
#ifndef RPC
#define RPC 4
#endif

// knob PF: 0 1
#ifndef PF
#define PF 1
#endif

// Blocks per SM that ptxas must fit (a register cap of 65536 / (BLOCK * MINB)).
// Unbounded, ptxas took 128 registers at the defaults (2 blocks of 256 per SM);
// at MINB = 3 it takes 80 with no spill: 3 blocks, 6 row slices in flight per SM.
// knob MINB: 1 2 3 4
#ifndef MINB
#define MINB 3
#endif

#define NWARPS (BLOCK / 32)
#define NPAIRS (CL * NWARPS)
#define THREADS (CL * BLOCK)

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024, "BLOCK must be a multiple of 32 in [32, 1024]");
static_assert(CL >= 1 && CL <= 8, "CL must be 1..8 (a portable cluster)");
static_assert(VEC >= 1 && RPC >= 1, "VEC and RPC must be positive");

struct Slice {
    float4 v[VEC];
    float e;  // the extra scalar: a head or tail element, or -inf
};

struct RowGeom {
    size_t b;  // element offset of the row
    int head, nv, tail;
};

__device__ __forceinline__ RowGeom row_geom(const float* x, long long r, int cols)
{
    RowGeom g;
    g.b = (size_t)r * (size_t)cols;
    // from the address, so a base that is only 4-byte aligned is still right
    g.head = min(cols, (int)((4 - ((reinterpret_cast<size_t>(x + g.b) >> 2) & 3)) & 3));
    g.nv = (cols - g.head) >> 2;
    g.tail = cols - g.head - 4 * g.nv;
    return g;
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Issue the loads of this thread's part of a row (they complete while other work runs).
__device__ __forceinline__ void load_slice(Slice& s, const float* __restrict__ x, const RowGeom& g,
                                           unsigned rank)
{
    const int t = (int)(rank * BLOCK + threadIdx.x);
    const float4* xv = reinterpret_cast<const float4*>(x + g.b + g.head);
    const float NI = neg_inf();
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int q = i * THREADS + t;
        s.v[i] = q < g.nv ? __ldcs(xv + q) : make_float4(NI, NI, NI, NI);
    }
    s.e = NI;
    if (rank == 0) {
        const int tid = threadIdx.x;
        if (tid < 3) {
            if (tid < g.head) s.e = __ldcs(x + g.b + tid);
        } else if (tid < 6) {
            if (tid - 3 < g.tail) s.e = __ldcs(x + g.b + g.head + 4 * g.nv + (tid - 3));
        }
    }
}

__device__ __forceinline__ float max4(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ float2 load_pair(unsigned local_addr, unsigned rank)
{
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local_addr), "r"(rank));
    float a, b;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(a), "=f"(b) : "r"(remote) : "memory");
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

// Publish this warp's (m_w, s_w), wait for every pair of the cluster and combine
// them all in this warp: returns exp(m_w - M) / S, the scale of this warp's exps
// (0 for a warp that holds no element, whose m_w is -inf). `pairs` is this row
// parity's NWARPS-pair buffer. Every thread of the cluster calls it once per row.
__device__ __forceinline__ float exchange(float m, float sum, float2* pairs)
{
    const float NI = neg_inf();
    const int lane = threadIdx.x & 31;
    if (lane == 0) pairs[threadIdx.x >> 5] = make_float2(m, sum);

    cluster_sync();  // every pair of this row, in every block of the cluster, is visible

    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(pairs));
    float2 p[(NPAIRS + 31) / 32];
    float M = NI;
#pragma unroll
    for (int j = 0; j < (NPAIRS + 31) / 32; ++j) {
        const int k = j * 32 + lane;
        p[j] = make_float2(NI, 0.0f);
        if (k < NPAIRS) p[j] = load_pair(base + 8u * (unsigned)(k % NWARPS), (unsigned)(k / NWARPS));
        M = fmaxf(M, p[j].x);
    }
    M = warp_max(M);  // finite: the row has at least one element
    float S = 0.0f;
#pragma unroll
    for (int j = 0; j < (NPAIRS + 31) / 32; ++j)
        S += p[j].y > 0.0f ? p[j].y * expf(p[j].x - M) : 0.0f;  // an empty warp's (-inf, 0) adds 0
    S = warp_sum(S);
    return expf(m - M) / S;
}

// One row from registers (the body fits: nv <= VEC * CL * BLOCK).
__device__ __forceinline__ void finish_row(Slice& s, float* __restrict__ y, const RowGeom& g,
                                           unsigned rank, float2* pairs, bool yvec)
{
    const float NI = neg_inf();
    const int t = (int)(rank * BLOCK + threadIdx.x);

    // warp max m_w (-inf only when the warp holds no element of the row)
    float m = s.e;
#pragma unroll
    for (int i = 0; i < VEC; ++i) m = fmaxf(m, max4(s.v[i]));
    m = warp_max(m);
    const float mr = m == NI ? 0.0f : m;  // an empty warp: every exp is exp(-inf) = 0, no NaN

    // exp against m_w, kept in the registers; their sum
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        float4& v = s.v[i];
        v.x = expf(v.x - mr); v.y = expf(v.y - mr); v.z = expf(v.z - mr); v.w = expf(v.w - mr);
        sum += (v.x + v.y) + (v.z + v.w);
    }
    s.e = expf(s.e - mr);
    sum += s.e;
    const float f = exchange(m, warp_sum(sum), pairs);

    float4* yv = reinterpret_cast<float4*>(y + g.b + g.head);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int q = i * THREADS + t;
        if (q < g.nv) {
            const float4 o = make_float4(s.v[i].x * f, s.v[i].y * f, s.v[i].z * f, s.v[i].w * f);
            if (yvec) {
                __stcs(yv + q, o);
            } else {
                float* yp = y + g.b + g.head + 4 * (size_t)q;
                yp[0] = o.x; yp[1] = o.y; yp[2] = o.z; yp[3] = o.w;
            }
        }
    }
    if (rank == 0) {
        const int tid = threadIdx.x;
        if (tid < 3) {
            if (tid < g.head) y[g.b + tid] = s.e * f;
        } else if (tid < 6) {
            if (tid - 3 < g.tail) y[g.b + g.head + 4 * g.nv + (tid - 3)] = s.e * f;
        }
    }
}

// A row longer than the registers hold (knobs too small for cols): element by
// element from global memory, read three times (max, sum, write). Correct, slow.
__device__ __noinline__ void slow_row(const float* __restrict__ x, float* __restrict__ y, long long r,
                                      int cols, unsigned rank, float2* pairs)
{
    const float NI = neg_inf();
    const float* xr = x + (size_t)r * (size_t)cols;
    float* yr = y + (size_t)r * (size_t)cols;
    const int t = (int)(rank * BLOCK + threadIdx.x);
    float m = NI;
    for (int c = t; c < cols; c += THREADS) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    const float mr = m == NI ? 0.0f : m;
    float sum = 0.0f;
    for (int c = t; c < cols; c += THREADS) sum += expf(xr[c] - mr);
    const float f = exchange(m, warp_sum(sum), pairs);
    for (int c = t; c < cols; c += THREADS) yr[c] = expf(xr[c] - mr) * f;
}

extern "C" __global__ void __launch_bounds__(BLOCK, MINB)
softmax_clreg(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    __shared__ float2 pairs[2][NWARPS];  // by row parity: see the header

    const unsigned rank = CL > 1 ? cluster_rank() : 0u;
    const long long r0 = (long long)(blockIdx.x / CL) * RPC;
    const long long r1 = min((long long)rows, r0 + RPC);  // uniform over the cluster
    // The split follows x's alignment; y takes float4 stores only when its address
    // has the same alignment mod 16 (always, with the harness's 256-byte buffers).
    const bool yvec = ((reinterpret_cast<size_t>(x) ^ reinterpret_cast<size_t>(y)) & 15) == 0;

    if (cols > 4 * VEC * THREADS) {  // uniform per launch; else every row's body fits (nv <= cols / 4)
        for (long long r = r0; r < r1; ++r)
            slow_row(x, y, r, cols, rank, pairs[(r - r0) & 1]);
    } else {
#if PF
        Slice a, b;
        if (r0 < r1) load_slice(a, x, row_geom(x, r0, cols), rank);
        for (long long r = r0; r < r1; r += 2) {
            if (r + 1 < r1) load_slice(b, x, row_geom(x, r + 1, cols), rank);
            finish_row(a, y, row_geom(x, r, cols), rank, pairs[0], yvec);
            if (r + 1 >= r1) break;
            if (r + 2 < r1) load_slice(a, x, row_geom(x, r + 2, cols), rank);
            finish_row(b, y, row_geom(x, r + 1, cols), rank, pairs[1], yvec);
        }
#else
        Slice a;
        for (long long r = r0; r < r1; ++r) {
            load_slice(a, x, row_geom(x, r, cols), rank);
            finish_row(a, y, row_geom(x, r, cols), rank, pairs[(r - r0) & 1], yvec);
        }
#endif
    }
    cluster_sync();  // no block leaves while a partner may still read its pairs
}
