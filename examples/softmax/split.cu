// softmax_split: row-wise fp32 softmax for rows of any length, each row cut into slices
// that live in shared memory, one slice per task, the row's (max, sum) combined across
// the blocks that hold its slices. x is read once from DRAM and y written once, whatever
// the row length: a 10^6-column row (4 MB) is 128 slices of 32 KB on 128 SMs.
//   y[r, c] = exp(x[r, c] - M) / S, M = max_c x[r, c], S = sum_c exp(x[r, c] - M)
//   x and y are rows x cols, row-major, densely packed. Any rows, cols >= 1.
//
// Launch rule (a program of one step, after the workspace's zeroing):
//   P      = max(1, ceil_div(cols / 4, SLICE / 16))     slices per row (all rows alike)
//   grid   = (min(rows * P, SMS * BPS), G, 1)            persistent; tasks taken by ticket
//            G = min(1, (NBUF * SMS * BPS / 2) / P): no launch (not applicable) for a row
//            longer than half the buffers of the grid (see "no deadlock" below)
//   block  = (BLOCK + 32, 1, 1)                          BLOCK consumers, one producer warp
//   shared = NBUF * SLICE bytes
//   args   x, y, partial (float2 per task, poison), sync (rows + 1 ints, zeroed), rows, cols
//
// Why: one block per row (rowblock, bulk) leaves SMs idle when rows are fewer than SMs
// and cannot hold a row longer than shared memory; a cluster (cluster, l2pass) is at most
// 8 blocks and l2pass re-reads the row from L2, which stops holding it once 16 rows of
// 4 MB are in flight (61% of the floor at 64 x 10^6 on an H200). Here task t is slice
// t % P of row t / P. The producer (lane 0 of the last warp) takes a ticket (an atomic
// counter in `sync`), and bulk-copies the slice into the next of NBUF buffers; the
// consumers, per task:
//   publish  max over the slice, then e = exp(x - m) written back in place and its sum:
//            the pair (m, s) goes to partial[t], then one atomic add on sync[row];
//   finish   wait until sync[row] == P, merge the row's P pairs (every warp in the same
//            order, so every block of the row gets the same M and S), y = e * exp(m - M) / S
//            with streaming stores, hand the buffer back to the producer.
// The consumers publish every task whose bytes have arrived (up to NBUF - 1 ahead)
// before they wait on a row, so a ticket once taken is published without waiting on
// any other row. Blocks stall only if every resident block holds NBUF tickets of one
// row that has more: P <= NBUF * SMS * BPS / 2 guarantees progress with at least half
// the grid resident (on the H200 all of it is: one block per SM fits). While they
// wait, the other buffers keep loading: the wait overlaps DRAM traffic. One expf per
// element. P = 1 skips the exchange: a persistent, double-buffered row per task.
//
// Per row (base b = r * cols, an element offset): head = min(cols, elements before the
// row's first 16-byte-aligned address) (0-3), NV = (cols - head) / 4 aligned float4s,
// tail = the 0-3 elements after them. Slice j holds body float4s [j * SL4, min(NV, (j +
// 1) * SL4)), possibly none; the head belongs to slice 0 and the tail to slice P - 1,
// read and written by consumer threads 0-2 with plain loads.
//
// Accuracy: expf (not __expf), fp32 throughout; the pairs merge as online softmax does.

// ---- the split-row skeleton: the same text in softmax, layernorm and rmsnorm_bf16 ----
// consumer threads (the block has one more warp, the producer's)
// knob BLOCK: 256 512 768
#ifndef BLOCK
#define BLOCK 512
#endif

// bytes of one slice (one buffer)
// knob SLICE: 16384 32768 49152 65536
#ifndef SLICE
#define SLICE 32768
#endif

// buffers: tasks in flight per block
// knob NBUF: 2 3 4 6
#ifndef NBUF
#define NBUF 4
#endif

// the H200's SM count: the persistent grid's size (launch rule only)
// knob SMS: 132
#ifndef SMS
#define SMS 132
#endif

// blocks per SM in the persistent grid (launch rule only)
// knob BPS: 1 2
#ifndef BPS
#define BPS 1
#endif

#define SL4 (SLICE / 16)
#define NWARPS (BLOCK / 32)
#define PIECE 16384  // bytes per bulk copy: several copies per slice keep the copy engine busy

static_assert(BLOCK % 32 == 0 && BLOCK >= 64 && BLOCK <= 992,
              "BLOCK must be a multiple of 32 in [64, 992] (one more warp is the producer)");
static_assert(SLICE % 16 == 0 && SLICE >= 16, "SLICE must be a positive multiple of 16 bytes");
static_assert(NBUF >= 2 && NBUF <= 8, "NBUF must be in [2, 8]");

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ void arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void consumers_sync()
{
    asm volatile("bar.sync 1, %0;\n" ::"n"(BLOCK) : "memory");
}

__device__ __forceinline__ int load_acquire(const int* p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ bool test_phase(unsigned bar, unsigned parity)
{
    unsigned done;
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}

// Returns once *count == P (every slice of the row published; thread 0's fence and the
// barrier make the partials visible to every consumer), publishing meanwhile each task
// of this block whose bytes land (tasks pub .. k + NBUF - 1). A block never waits on a
// row while it holds a landed slice it has not published: that keeps the ticket scheme
// free of deadlock, and the slices that land during the wait are reduced under it
// instead of after it. flag is two ints, alternated so that one barrier a round suffices.
template <class Publish>
__device__ __forceinline__ void await_row(const int* count, int P, const int& pub, const int& done, int k,
                                          const unsigned long long* full, volatile int* flag, unsigned& nflag,
                                          Publish& publish)
{
    for (;;) {
        volatile int* f = flag + (nflag++ & 1);
        if (threadIdx.x == 0) {
            int state = 0;
            if (load_acquire(count) >= P) {
                __threadfence();
                state = 1;
            } else if (pub < done && pub <= k + NBUF - 1 && test_phase(smem_addr(&full[pub % NBUF]), (pub / NBUF) & 1)) {
                state = 2;
            }
            *f = state;
        }
        consumers_sync();
        const int state = *f;
        if (state == 1) return;
        if (state == 2)
            publish();
        else if (threadIdx.x == 0)
            __nanosleep(64);
    }
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

// Block-wide max or sum over the consumers; red alternates between two halves so a fast
// warp's next reduction never overwrites what a slow one still reads.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red)
{
    v = MAX ? warp_max(v) : warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    consumers_sync();
    const int lane = threadIdx.x & 31;
    float w = lane < NWARPS ? red[lane] : (MAX ? NEG_INF : 0.0f);
    return MAX ? warp_max(w) : warp_sum(w);
}

// ---- end of the split-row skeleton ----

// Merge two online pairs; a -inf maximum (nothing folded) merges to the other pair.
__device__ __forceinline__ float2 merge(float2 a, float2 b)
{
    const float M = fmaxf(a.x, b.x);
    if (M == NEG_INF) return a;
    return make_float2(M, a.y * expf(a.x - M) + b.y * expf(b.x - M));
}

struct Task {
    int row, slice;   // row r, slice j of it
    int head, nv;     // the row's head elements and aligned float4s
    int lo, n4;       // the slice's first body float4 and its count (0 or more)
};

__device__ __forceinline__ Task task_of(int t, int P, int cols, const float* x)
{
    Task k;
    k.row = t / P;
    k.slice = t - k.row * P;
    const unsigned long long ax = reinterpret_cast<unsigned long long>(x + (size_t)k.row * (size_t)cols);
    k.head = min(cols, (int)(((16 - (ax & 15ull)) & 15ull) >> 2));
    k.nv = (cols - k.head) >> 2;
    k.lo = k.slice * SL4;
    k.n4 = max(0, min(k.nv - k.lo, SL4));
    return k;
}

extern "C" __global__ void __launch_bounds__(BLOCK + 32, 1)
softmax_split(const float* __restrict__ x, float* __restrict__ y, float2* __restrict__ partial, int* sync, int rows,
              int cols)
{
    __shared__ __align__(8) unsigned long long full[NBUF];
    __shared__ __align__(8) unsigned long long empty[NBUF];
    __shared__ int task_id[NBUF];
    __shared__ int flag[2];  // await_row's verdicts
    __shared__ float odd[NBUF][6];  // exp(x - m) of head elements 0-2 and tail elements 0-2
    __shared__ float red[2][NWARPS];
    extern __shared__ __align__(128) float4 buf[];

    const int P = max(1, ((cols >> 2) + SL4 - 1) / SL4);
    const int T = rows * P;
    int* ticket = sync + rows;

    if (threadIdx.x == 0) {
        for (int i = 0; i < NBUF; ++i) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&full[i])) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(&empty[i])), "n"(NWARPS) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (threadIdx.x >= BLOCK) {
        if (threadIdx.x != BLOCK) return;
        for (int k = 0;; ++k) {
            const int b = k % NBUF;
            if (k >= NBUF) wait_phase(smem_addr(&empty[b]), ((k / NBUF) - 1) & 1);
            const int t = atomicAdd(ticket, 1);
            task_id[b] = t;
            const unsigned full_b = smem_addr(&full[b]);
            if (t >= T) {
                arrive(full_b);
                return;
            }
            const Task tk = task_of(t, P, cols, x);
            const unsigned bytes = 16u * (unsigned)tk.n4;
            if (bytes == 0) {
                arrive(full_b);
                continue;
            }
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full_b), "r"(bytes) : "memory");
            const char* src = reinterpret_cast<const char*>(x + (size_t)tk.row * (size_t)cols + tk.head) + 16ull * tk.lo;
            const unsigned dst = smem_addr(buf + (size_t)b * SL4);
            for (unsigned o = 0; o < bytes; o += PIECE)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                             ::"r"(dst + o), "l"(reinterpret_cast<unsigned long long>(src + o)), "r"(min(PIECE, bytes - o)),
                             "r"(full_b) : "memory");
        }
    }

    const int tid = threadIdx.x;
    // x and y rows share their alignment mod 16 (the harness's bases are 256-byte
    // aligned); if a caller's did not, y takes scalar stores. Uniform per launch.
    const bool y_aligned = ((reinterpret_cast<unsigned long long>(x) ^ reinterpret_cast<unsigned long long>(y)) & 15ull) == 0;
    unsigned nred = 0;  // reductions so far: which half of red the next one uses
    float m_of[NBUF], s_of[NBUF];  // each task's (m, s), kept for its finish (indices are compile-time below)

    int pub = 0, done = 0x7fffffff;
    unsigned nflag = 0;
    // Publishes task pub (every consumer waits for its bytes); past the last ticket, sets done.
    auto publish = [&]() {
        const int b = pub % NBUF;
        wait_phase(smem_addr(&full[b]), (pub / NBUF) & 1);
        const int t = task_id[b];
        if (t >= T) {
            done = pub;
            return;
        }
        const Task tk = task_of(t, P, cols, x);
        const float* xr = x + (size_t)tk.row * (size_t)cols;
        float4* s4 = buf + (size_t)b * SL4;
        const int tail0 = tk.head + 4 * tk.nv;
        const bool has_h = tk.slice == 0 && tid < tk.head;
        const bool has_t = tk.slice == P - 1 && tid < 3 && tail0 + tid < cols;
        const float hv = has_h ? xr[tid] : NEG_INF, tv = has_t ? xr[tail0 + tid] : NEG_INF;

        float m = fmaxf(hv, tv);
        for (int u = tid; u < tk.n4; u += BLOCK) {
            const float4 v = s4[u];
            m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
        }
        m = block_reduce<true>(m, red[nred++ & 1]);
        // A slice of -inf only (or none) has m = -inf: its e are 0 and its pair (-inf,
        // 0) merges away; its scale exp(m - M) is 0 unless the whole row is -inf (NaN,
        // as the reference).
        const float mm = m == NEG_INF ? 0.0f : m;
        float s = 0.0f;
        for (int u = tid; u < tk.n4; u += BLOCK) {
            float4 v = s4[u];
            v = make_float4(expf(v.x - mm), expf(v.y - mm), expf(v.z - mm), expf(v.w - mm));
            s4[u] = v;
            s += (v.x + v.y) + (v.z + v.w);
        }
        if (has_h) {
            odd[b][tid] = expf(hv - mm);
            s += odd[b][tid];
        }
        if (has_t) {
            odd[b][3 + tid] = expf(tv - mm);
            s += odd[b][3 + tid];
        }
        s = block_reduce<false>(s, red[nred++ & 1]);
#pragma unroll
        for (int i = 0; i < NBUF; ++i)
            if (i == b) m_of[i] = m, s_of[i] = s;
        if (P > 1 && tid == 0) {
            __stcg(partial + t, make_float2(m, s));
            __threadfence();
            atomicAdd(sync + tk.row, 1);
        }
        ++pub;
    };
    for (int k = 0; k < done; ++k) {
        while (pub <= k && pub < done) publish();
        if (k >= done) break;

        const int b = k % NBUF;
        const Task tk = task_of(task_id[b], P, cols, x);
        float m = 0.0f, s = 0.0f;
#pragma unroll
        for (int i = 0; i < NBUF; ++i)
            if (i == b) m = m_of[i], s = s_of[i];
        float scale;
        if (P > 1) {
            await_row(sync + tk.row, P, pub, done, k, full, flag, nflag, publish);
            // Every warp merges the row's pairs in the same order (lane l folds pairs l,
            // l + 32, ..., then the butterfly; merge is commutative in floating point), so
            // all blocks of the row agree on M and S to the bit.
            const float2* pr = partial + (size_t)tk.row * P;
            float2 acc = make_float2(NEG_INF, 0.0f);
            for (int i = tid & 31; i < P; i += 32) acc = merge(acc, __ldcg(pr + i));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                acc = merge(acc, make_float2(__shfl_xor_sync(0xffffffffu, acc.x, o), __shfl_xor_sync(0xffffffffu, acc.y, o)));
            scale = expf(m - acc.x) / acc.y;
        } else {
            scale = 1.0f / s;
        }

        const float4* s4 = buf + (size_t)b * SL4;
        float* yr = y + (size_t)tk.row * (size_t)cols + tk.head;
        float4* y4 = reinterpret_cast<float4*>(yr) + tk.lo;
        for (int u = tid; u < tk.n4; u += BLOCK) {
            const float4 e = s4[u];
            const float4 o = make_float4(e.x * scale, e.y * scale, e.z * scale, e.w * scale);
            if (y_aligned) {
                __stcs(y4 + u, o);
            } else {
                float* ys = yr + 4 * (tk.lo + u);
                ys[0] = o.x;
                ys[1] = o.y;
                ys[2] = o.z;
                ys[3] = o.w;
            }
        }
        const int tail0 = tk.head + 4 * tk.nv;
        if (tk.slice == 0 && tid < tk.head) yr[tid - tk.head] = odd[b][tid] * scale;
        if (tk.slice == P - 1 && tid < 3 && tail0 + tid < cols) yr[tail0 - tk.head + tid] = odd[b][3 + tid] * scale;
        __syncwarp();
        if ((tid & 31) == 0) arrive(smem_addr(&empty[b]));
    }
}
