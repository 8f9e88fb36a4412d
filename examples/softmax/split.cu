// softmax_split: row-wise fp32 softmax for rows of any length, each row cut into slices
// that live in shared memory, one slice per task, the row's (max, sum) combined across
// the blocks that hold its slices. x is read once from DRAM and y written once, whatever
// the row length: a 10^6-column row (4 MB) is 64 slices of 64 KB on 64 SMs.
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
// t % P of row t / P. The producer (lane 0 of the last warp) keeps NBUF buffers loaded,
// each with the slice of the next ticket (an atomic counter in `sync`); the consumers
// act on one buffer at a time (the skeleton's produce and consume):
//   publish  max over the slice, then e = exp(x - m) written back in place and its sum:
//            the pair (m, s) goes to partial[t], then one atomic add on sync[row];
//   finish   once sync[row] == P, merge the row's P pairs (every warp in the same
//            order, so every block of the row gets the same M and S), y = e * exp(m - M) / S
//            with streaming stores, hand the buffer back to the producer.
// Landed slices are published before anything is finished and slices finish in the
// order their rows complete, so no block waits on a row while holding work another row
// needs (consume's comment has the argument); the launch rule keeps P within half the
// grid's buffers. One expf per element. P = 1 skips the exchange: each task is a whole
// row, finished right after it is reduced.
//
// Slices and rows: see Task below (VEC = 4 floats a vector, heads and tails of 0-3).
//
// Accuracy: expf (not __expf), fp32 throughout; the pairs merge as online softmax does.

typedef float elem_t;  // x's element
#define VEC 4  // elements a 16-byte vector

// ---- the split-row skeleton: the same text in softmax, layernorm and rmsnorm_bf16 ----
// consumer threads (the block has one more warp, the producer's)
// knob BLOCK: 256 512 768
#ifndef BLOCK
#define BLOCK 512
#endif

// bytes of one slice (one buffer). Defaults: the best of eight settings measured for
// softmax on an H200 with the consumers finishing slices in ticket order (64 KB x 3: 90% of
// the floor at 4096 x 16384 against 42% at 32 KB x 4; 58% against 29% at 64 x 10^6):
// fewer, larger tasks cost less per byte. Not measured with consume's any-order finishing.
// knob SLICE: 16384 32768 49152 65536
#ifndef SLICE
#define SLICE 65536
#endif

// buffers: tasks in flight per block
// knob NBUF: 2 3 4 6
#ifndef NBUF
#define NBUF 3
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

#define SL4 (SLICE / 16)  // 16-byte vectors a slice
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


// Task t is slice t % P of row t / P. Per row (base b = r * cols, an element offset): head
// = min(cols, elements before the row's first 16-byte-aligned address), NV = (cols -
// head) / VEC aligned 16-byte vectors, tail = the elements after them (fewer than VEC).
// Slice j holds body vectors [j * SL4, min(NV, (j + 1) * SL4)), possibly none; the head
// belongs to slice 0 and the tail to slice P - 1, read and written with plain accesses.
struct Task {
    int row, slice;   // row r, slice j of it
    int head, nv;     // the row's head elements and aligned vectors
    int lo, n4;       // the slice's first body vector and its count (0 or more)
};

__device__ __forceinline__ Task task_of(int t, int P, int cols, const elem_t* x)
{
    Task k;
    k.row = t / P;
    k.slice = t - k.row * P;
    const unsigned long long ax = reinterpret_cast<unsigned long long>(x + (size_t)k.row * (size_t)cols);
    k.head = min(cols, (int)(((16 - (ax & 15ull)) & 15ull) / sizeof(elem_t)));
    k.nv = (cols - k.head) / VEC;
    k.lo = k.slice * SL4;
    k.n4 = max(0, min(k.nv - k.lo, SL4));
    return k;
}

// The producer (one thread) keeps every buffer loaded: once a buffer's task is finished
// (its empty barrier's phase completes), it takes the next ticket and bulk-copies that
// slice into the buffer, the bytes landing on the buffer's full barrier. A ticket past
// the last task retires the buffer (its full barrier completes with no bytes). Buffers
// are refilled in whatever order the consumers free them.
__device__ __forceinline__ void produce(const elem_t* x, int P, int T, int cols, int* ticket, int* task_id,
                                        unsigned long long* full, unsigned long long* empty, const void* buf)
{
    const unsigned ALL = (1u << NBUF) - 1;
    unsigned epar = 0, busy = 0, retired = 0;  // per buffer: empty phase awaited, ever filled, out of tasks
    while (retired != ALL) {
        bool any = false;
#pragma unroll
        for (int b = 0; b < NBUF; ++b) {
            if ((retired >> b) & 1) continue;
            if ((busy >> b) & 1) {
                if (!test_phase(smem_addr(&empty[b]), (epar >> b) & 1)) continue;
                epar ^= 1u << b;
            }
            busy |= 1u << b;
            any = true;
            const int t = atomicAdd(ticket, 1);
            task_id[b] = t;
            const unsigned full_b = smem_addr(&full[b]);
            if (t >= T) {
                retired |= 1u << b;
                arrive(full_b);
                continue;
            }
            const Task tk = task_of(t, P, cols, x);
            const unsigned bytes = 16u * (unsigned)tk.n4;
            if (bytes == 0) {
                arrive(full_b);
                continue;
            }
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full_b), "r"(bytes) : "memory");
            const char* src = reinterpret_cast<const char*>(x + (size_t)tk.row * (size_t)cols + tk.head) + 16ull * tk.lo;
            const unsigned dst = smem_addr(buf) + (unsigned)b * (unsigned)SLICE;
            for (unsigned o = 0; o < bytes; o += PIECE)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                             ::"r"(dst + o), "l"(reinterpret_cast<unsigned long long>(src + o)), "r"(min(PIECE, bytes - o)),
                             "r"(full_b) : "memory");
        }
        if (!any) __nanosleep(32);
    }
}

// The consumers' loop. Each round warp 0 looks at every buffer (lane b at buffer b) and
// the block acts on one: publish a slice whose bytes have landed (publish(b, t): reduce
// it, write its partial to the workspace, count it on sync[row]), else finish a published
// slice whose row is complete (finish(b, t): merge the row's partials, write y) and hand
// its buffer back. Landed slices go first and nothing waits on one row: every landed
// slice is published within a round whatever other rows do, so a row whose tickets are
// all taken completes; tickets are taken in order, so the oldest incomplete row has all
// of its tickets taken once every buffer before it is freed (P <= the grid's buffers,
// which the launch rule keeps with room to spare). Slices finish in whatever order their
// rows complete. P = 1 finishes each slice right after publishing it.
template <class Publish, class Finish>
__device__ __forceinline__ void consume(int P, int T, const int* sync, const int* task_id, unsigned long long* full,
                                        unsigned long long* empty, volatile int* flag, Publish& publish,
                                        Finish& finish)
{
    const unsigned ALL = (1u << NBUF) - 1;
    const int lane = threadIdx.x & 31;
    unsigned fpar = 0, pubd = 0, retired = 0;  // per buffer: full phase awaited, published, out of tasks
    for (unsigned round = 0; retired != ALL; ++round) {
        volatile int* f = flag + (round & 1);  // alternate: one barrier a round suffices
        if (threadIdx.x < 32) {
            bool land = false, ready = false;
            if (lane < NBUF && !((retired >> lane) & 1)) {
                if (!((pubd >> lane) & 1)) {
                    land = test_phase(smem_addr(&full[lane]), (fpar >> lane) & 1);
                } else if (load_acquire(sync + task_id[lane] / P) >= P) {
                    __threadfence();  // the row's partials, for every consumer after the barrier
                    ready = true;
                }
            }
            const unsigned l = __ballot_sync(0xffffffffu, land), r = __ballot_sync(0xffffffffu, ready);
            if (lane == 0) *f = l ? __ffs(l) - 1 : r ? NBUF + __ffs(r) - 1 : -1;
        }
        consumers_sync();
        const int act = *f;
        if (act < 0) {
            if (threadIdx.x == 0) __nanosleep(32);
            continue;
        }
        const int b = act % NBUF;
        if (act < NBUF) {
            wait_phase(smem_addr(&full[b]), (fpar >> b) & 1);  // complete: each consumer observes the landing
            fpar ^= 1u << b;
            const int t = task_id[b];
            if (t >= T) {
                retired |= 1u << b;
                continue;
            }
            publish(b, t);
            if (P > 1) {
                pubd |= 1u << b;
                continue;
            }
            consumers_sync();  // the partial thread 0 wrote, for every consumer
        }
        finish(b, task_id[b]);
        pubd &= ~(1u << b);
        __syncwarp();
        if (lane == 0) arrive(smem_addr(&empty[b]));
    }
}

// ---- end of the split-row skeleton ----

// Merge two online pairs; a -inf maximum (nothing folded) merges to the other pair.
__device__ __forceinline__ float2 merge(float2 a, float2 b)
{
    const float M = fmaxf(a.x, b.x);
    if (M == NEG_INF) return a;
    return make_float2(M, a.y * expf(a.x - M) + b.y * expf(b.x - M));
}


extern "C" __global__ void __launch_bounds__(BLOCK + 32, 1)
softmax_split(const float* __restrict__ x, float* __restrict__ y, float2* __restrict__ partial, int* sync, int rows,
              int cols)
{
    __shared__ __align__(8) unsigned long long full[NBUF];
    __shared__ __align__(8) unsigned long long empty[NBUF];
    __shared__ int task_id[NBUF];
    __shared__ int flag[2];  // consume's choices
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
        if (threadIdx.x == BLOCK) produce(x, P, T, cols, ticket, task_id, full, empty, buf);
        return;
    }

    const int tid = threadIdx.x;
    // x and y rows share their alignment mod 16 (the harness's bases are 256-byte
    // aligned); if a caller's did not, y takes scalar stores. Uniform per launch.
    const bool y_aligned = ((reinterpret_cast<unsigned long long>(x) ^ reinterpret_cast<unsigned long long>(y)) & 15ull) == 0;
    unsigned nred = 0;  // reductions so far: which half of red the next one uses
    float m_of[NBUF], s_of[NBUF];  // each task's (m, s), kept for its finish (indices are compile-time below)

    // Reduces the slice in buffer b (task t) and publishes its partial.
    auto publish = [&](int b, int t) {
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
    };
    // Merges the row's partials and writes the slice in buffer b (task t) to y.
    auto finish = [&](int b, int t) {
        const Task tk = task_of(t, P, cols, x);
        float m = 0.0f, s = 0.0f;
#pragma unroll
        for (int i = 0; i < NBUF; ++i)
            if (i == b) m = m_of[i], s = s_of[i];
        float scale;
        if (P > 1) {
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
    };
    consume(P, T, sync, task_id, full, empty, flag, publish, finish);
}
