// softmax_cluster: a long row split over a thread block cluster (Hopper). Each of
// the CL blocks of a cluster caches its slice of the row in shared memory, reduces
// it to a (max, sum of exp) pair, and reads its partners' pairs through
// distributed shared memory; then it writes its slice of y. x is read from DRAM
// once, y written once.
//   y[r, c] = exp(x[r, c] - max_c x[r, :]) / sum_c exp(x[r, c] - max_c x[r, :])
//   x and y are rows x cols, row-major, densely packed. Any rows, cols >= 1.
//
// Launch rule (a program of one step, for its `cluster`):
//   grid    = (CL * rows, 1, 1), cluster = (CL, 1, 1), block = (BLOCK, 1, 1)
//             (blocks CL * r .. CL * r + CL - 1 are row r's cluster)
//   shared  = 4 * (round_up(ceil_div(cols, CL), 4) + 4) bytes (dynamic: the slice)
//   args    x, y, rows, cols, i32:round_up(ceil_div(cols, CL), 4)  (the slice length)
//
// Why: online.cu gives a row to one block. A 50257-float row (201 KB) then either
// fills the SM's shared memory (one block per SM: its read, reduce and write
// phases cannot overlap another row's) or is partly re-read from L2. Split over a
// cluster, a slice is 50 KB at CL = 4: four blocks of 512 threads share an SM,
// every row's slices are read at once by four SMs, and the phases of different
// rows overlap. Only 2 x CL floats cross between the blocks.
//
// Per block (cluster rank k, slice [k * chunk, min(cols, (k + 1) * chunk))):
//   pass 1  read the slice into shared memory (streaming float4 loads for the
//           16-byte-aligned body, scalars for the 0-3 elements before and after),
//           block max m;
//   pass 2  block sum s of exp(v - m) over shared memory; (m, s) published;
//   cluster barrier; every thread reads the CL pairs (mapa + ld.shared::cluster)
//           and combines M = max m_k, S = sum s_k exp(m_k - M); the block arrives
//           at a second cluster barrier (its pair may now go) and waits on it only
//           before exiting, so the partners' reads overlap this block's writes;
//   pass 3  y = exp(v - M) / S from shared memory, streaming stores.
// A slice past the end of the row (cols < CL * chunk) is empty: it publishes
// (-inf, 0), which the combination ignores.
//
// Accuracy: expf (not __expf), fp32 sums, one reciprocal per row.

// knob CL: 2 4 8
#ifndef CL
#define CL 4
#endif

// knob BLOCK: 256 512 1024
#ifndef BLOCK
#define BLOCK 512
#endif

#define NWARPS (BLOCK / 32)

static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32, at most 1024");

__device__ __forceinline__ float block_reduce(float v, float* scratch, bool is_max)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads();  // scratch may still be read by the previous reduction
    if ((threadIdx.x & 31) == 0)
        scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = scratch[0];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w)
        r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
    return r;
}

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// The pair at `local` in block `rank`'s shared memory.
__device__ __forceinline__ float2 remote_pair(const float2* local, unsigned rank)
{
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
    float a, b;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(a), "=f"(b) : "r"(remote) : "memory");
    return make_float2(a, b);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_cluster(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int chunk)
{
    extern __shared__ __align__(16) float cache[];  // chunk + 4 floats
    __shared__ float scratch[NWARPS];
    __shared__ float2 pair;
    const float NEG_INF = -__int_as_float(0x7f800000);

    const unsigned rank = cluster_rank();
    const long long row = blockIdx.x / CL;
    const int c0 = (int)rank * chunk;
    const int n = max(0, min(cols, c0 + chunk) - c0);
    const size_t first = (size_t)row * cols + c0;  // element offset of the slice in x and y
    // Elements before the first 16-byte boundary (the buffers are 256-byte aligned);
    // the cache is shifted by `pad` so its body is 16-byte aligned as well.
    const int head = min(n, (int)((4 - (first & 3)) & 3));
    const int pad = (4 - head) & 3;
    const int nbody = (n - head) >> 2;
    const int tail0 = head + 4 * nbody;
    const float* xs = x + first;
    float* ys = y + first;
    float* c = cache + pad;

    float m = NEG_INF;
    for (int i = threadIdx.x; i < head; i += BLOCK) {
        const float v = xs[i];
        c[i] = v;
        m = fmaxf(m, v);
    }
    for (int j = threadIdx.x; j < nbody; j += BLOCK) {
        const float4 v = __ldcs(reinterpret_cast<const float4*>(xs + head) + j);
        *reinterpret_cast<float4*>(c + head + 4 * j) = v;
        m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    for (int i = tail0 + threadIdx.x; i < n; i += BLOCK) {
        const float v = xs[i];
        c[i] = v;
        m = fmaxf(m, v);
    }
    m = block_reduce(m, scratch, true);

    float s = 0.0f;
    if (n > 0) {  // each thread reads back only what it wrote: no barrier needed before this loop
        for (int i = threadIdx.x; i < head; i += BLOCK)
            s += expf(c[i] - m);
        for (int j = threadIdx.x; j < nbody; j += BLOCK) {
            const float4 v = *reinterpret_cast<const float4*>(c + head + 4 * j);
            s += expf(v.x - m) + expf(v.y - m) + expf(v.z - m) + expf(v.w - m);
        }
        for (int i = tail0 + threadIdx.x; i < n; i += BLOCK)
            s += expf(c[i] - m);
    }
    s = block_reduce(s, scratch, false);
    if (threadIdx.x == 0)
        pair = make_float2(m, s);

    cluster_arrive();
    cluster_wait();  // every block's pair is published
    // Combined online, as the pairs arrive: S is rescaled when the max grows.
    float M = NEG_INF, S = 0.0f;
#pragma unroll
    for (int k = 0; k < CL; ++k) {
        const float2 p = remote_pair(&pair, k);
        if (p.y > 0.0f) {  // an empty slice's (-inf, 0) adds nothing (and no NaN)
            const float M_new = fmaxf(M, p.x);
            S = S * expf(M - M_new) + p.y * expf(p.x - M_new);  // expf(-inf) = 0 on the first
            M = M_new;
        }
    }
    cluster_arrive();  // this block has read every pair; partners may exit once all have

    const float inv = 1.0f / S;
    for (int i = threadIdx.x; i < head; i += BLOCK)
        ys[i] = expf(c[i] - M) * inv;
    for (int j = threadIdx.x; j < nbody; j += BLOCK) {
        const float4 v = *reinterpret_cast<const float4*>(c + head + 4 * j);
        __stcs(reinterpret_cast<float4*>(ys + head) + j,
               make_float4(expf(v.x - M) * inv, expf(v.y - M) * inv, expf(v.z - M) * inv, expf(v.w - M) * inv));
    }
    for (int i = tail0 + threadIdx.x; i < n; i += BLOCK)
        ys[i] = expf(c[i] - M) * inv;
    cluster_wait();  // nobody's shared memory goes away while a partner may still read it
}
