// layernorm_bulk: row-wise fp32 layer norm, each row staged whole in shared memory by
// the copy engine (1D bulk copies, cp.async.bulk) and the next row's copies issued
// while the current row is written, so DRAM reads and writes overlap on every SM.
//   mean = sum_c x[r, c] / cols,  var = sum_c (x[r, c] - mean)^2 / cols
//   y[r, c] = (x[r, c] - mean) * rsqrt(var + 1e-5) * weight[c] + bias[c]
//   x and y are rows x cols, row-major, densely packed; weight, bias have cols
//   elements. Any rows, cols >= 1.
//
// Launch rule (a program of one step):
//   grid   = (min(rows, SMS * BPS), 1, 1)   persistent: block b does rows b, b + grid, ...
//   block  = (BLOCK + 32, 1, 1)             BLOCK consumer threads and one producer warp
//   shared = 16 * max(1, min(ceil_div(cols, 4), CAP4)) bytes of dynamic shared memory
//   args   x, weight, bias, y, rows, cols
//
// Why: rowblock and welford hold the row in registers, one block per row; at
// 32768 x 4096 they reach 96% of the floor where torch.compile reaches the copy
// rate, the rest lost between a block's last store and the next block's first load
// and in the last partial wave. Here a persistent block keeps the next row's bytes
// streaming in (bulk copies need no registers) while it normalizes and writes the
// current one. The pipeline is softmax/bulk.cu's (that header has the details):
// the row cut into chunks of CHUNK bytes, a `full` mbarrier per chunk completed by
// the copy engine and an `empty` one every consumer warp arrives at once it has
// written the chunk out; the producer (lane 0 of the last warp) refills a chunk
// with the next row as soon as it is empty. Head and tail elements (0-3 each
// before and after the row's 16-byte-aligned body) are read by consumer threads 0-2
// with plain loads and kept in registers.
//   pass 1  wait for each chunk, sum it; block sum -> mean
//   pass 2  sum of squared deviations from shared memory (exact two-pass variance)
//   pass 3  y = (x - mean) * rstd * w + b (w, b from L2: float4 when the body starts
//           at column 0 mod 4, as it does when cols % 4 == 0), streaming stores,
//           one arrival per warp on chunk i's empty barrier
// A row that does not fit on chip takes a three-pass path from global memory, by the
// consumers alone: correct for any cols, not fast.
//
// Accuracy: fp32 sums, variance from deviations about the mean, rsqrtf.

// Defaults: a first guess (256 consumers, 8 KB chunks, 4 blocks per SM), not yet
// measured; the tuner searches the rest.

// consumer threads (the block has one more warp, the producer's)
// knob BLOCK: 128 256 512 960
#ifndef BLOCK
#define BLOCK 256
#endif

// knob CHUNK: 4096 8192 16384
#ifndef CHUNK
#define CHUNK 8192
#endif

// the H200's SM count: the persistent grid's size (launch rule only)
// knob SMS: 132
#ifndef SMS
#define SMS 132
#endif

// blocks per SM in the persistent grid (launch rule only; more than fit just queue)
// knob BPS: 1 2 4 6
#ifndef BPS
#define BPS 4
#endif

// float4s of dynamic shared memory at most (launch rule only), as in softmax/bulk.cu
#define CAP4 14336

#define MAXCH 64
#define NWARPS (BLOCK / 32)
#define LN_EPS 1e-5f

static_assert(BLOCK % 32 == 0 && BLOCK >= 64 && BLOCK <= 992,
              "BLOCK must be a multiple of 32 in [64, 992] (one more warp is the producer)");
static_assert(CHUNK % 16 == 0 && CHUNK >= 16, "CHUNK must be a positive multiple of 16 bytes");

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

// Arrive and expect `bytes` from the copy engine, then copy them from global memory.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(src)), "r"(bytes), "r"(bar) : "memory");
}

// Consumers only (the producer warp runs its own loop): named barrier 1.
__device__ __forceinline__ void consumers_sync()
{
    asm volatile("bar.sync 1, %0;\n" ::"n"(BLOCK) : "memory");
}

// Block sum over the consumers; red holds NWARPS floats, and the caller alternates
// two of them (a fast warp's next reduction writes the other while a slow one reads).
__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[threadIdx.x >> 5] = v;
    consumers_sync();
    v = lane < NWARPS ? red[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float sq_dev(float4 v, float mean)
{
    const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
    return fmaf(a, a, fmaf(b, b, fmaf(c, c, d * d)));
}

// The row's geometry: head elements before the first 16-byte-aligned one, NV float4s.
__device__ __forceinline__ void row_shape(const float* xr, int cols, int& head, int& nv)
{
    const unsigned long long ax = reinterpret_cast<unsigned long long>(xr);
    head = min(cols, (int)(((16 - (ax & 15ull)) & 15ull) >> 2));
    nv = (cols - head) >> 2;
}

// A row that does not fit on chip: three passes over global memory, consumers only.
__device__ void row_from_global(const float* __restrict__ xr, const float* __restrict__ weight,
                                const float* __restrict__ bias, float* __restrict__ yr, int cols,
                                float* red0, float* red1)
{
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += xr[c];
    const float mean = block_sum(s, red0) / (float)cols;
    float d = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
        const float a = xr[c] - mean;
        d = fmaf(a, a, d);
    }
    const float rstd = rsqrtf(block_sum(d, red1) / (float)cols + LN_EPS);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = fmaf((xr[c] - mean) * rstd, weight[c], bias[c]);
}

extern "C" __global__ void __launch_bounds__(BLOCK + 32)
layernorm_bulk(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
               float* __restrict__ y, int rows, int cols)
{
    __shared__ __align__(8) unsigned long long full[MAXCH];
    __shared__ __align__(8) unsigned long long empty[MAXCH];
    __shared__ float red[4][NWARPS];   // two reductions per row, double-buffered
    extern __shared__ __align__(128) float4 buf[];

    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn));
    const int nch = (int)((4ull * (unsigned long long)cols + CHUNK - 1) / CHUNK);
    // Uniform per launch: a row fits when its body does (16 * NV <= 4 * cols <= dyn).
    const bool on_chip = 4ull * (unsigned long long)cols <= dyn && nch <= MAXCH;
    // y's rows share x's alignment mod 16 (the harness's bases are 256-byte aligned);
    // if a caller's did not, y takes scalar stores. Uniform per launch.
    const bool y_aligned = ((reinterpret_cast<unsigned long long>(x) ^ reinterpret_cast<unsigned long long>(y)) & 15ull) == 0;
    const bool wb_aligned = ((reinterpret_cast<unsigned long long>(weight) | reinterpret_cast<unsigned long long>(bias)) & 15ull) == 0;
    const float inv_cols = 1.0f / (float)cols;

    if (on_chip && threadIdx.x == 0) {
        for (int i = 0; i < nch; ++i) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&full[i])) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(&empty[i])), "n"(NWARPS) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (threadIdx.x >= BLOCK) {
        // The producer: lane 0 of the last warp walks the same rows as the consumers.
        if (!on_chip || threadIdx.x != BLOCK) return;
        unsigned it = 0;
        for (int r = blockIdx.x; r < rows; r += gridDim.x, ++it) {
            const float* xr = x + (size_t)r * (size_t)cols;
            int head, nv;
            row_shape(xr, cols, head, nv);
            const char* body = reinterpret_cast<const char*>(xr + head);
            const long long nbytes = 16ll * nv;
            for (int i = 0; i < nch; ++i) {
                if (it > 0) wait_phase(smem_addr(&empty[i]), (it - 1) & 1);
                const long long left = nbytes - (long long)i * CHUNK;
                const unsigned bytes = left <= 0 ? 0u : (unsigned)min(left, (long long)CHUNK);
                if (bytes > 0)
                    bulk_load(smem_addr(reinterpret_cast<char*>(buf) + (size_t)i * CHUNK), body + (size_t)i * CHUNK,
                              bytes, smem_addr(&full[i]));
                else
                    arrive(smem_addr(&full[i]));
            }
        }
        return;
    }

    const int tid = threadIdx.x;
    unsigned it = 0;
    for (int r = blockIdx.x; r < rows; r += gridDim.x, ++it) {
        const size_t base = (size_t)r * (size_t)cols;
        const float* xr = x + base;
        float* yr = y + base;
        float* red0 = red[2 * (it & 1)];
        float* red1 = red[2 * (it & 1) + 1];
        if (!on_chip) {
            row_from_global(xr, weight, bias, yr, cols, red0, red1);
            continue;
        }
        int head, nv;
        row_shape(xr, cols, head, nv);
        const int tail0 = head + 4 * nv;

        // Odd elements: thread t < 3 owns head element t and tail element tail0 + t.
        const bool has_h = tid < head, has_t = tid < 3 && tail0 + tid < cols;
        const float oh = has_h ? xr[tid] : 0.0f;
        const float ot = has_t ? xr[tail0 + tid] : 0.0f;

        // Pass 1: sum each chunk as the copy engine completes it.
        float s = oh + ot;
        const unsigned parity = it & 1;
        for (int i = 0; i < nch; ++i) {
            wait_phase(smem_addr(&full[i]), parity);
            const int lo = i * (CHUNK / 16), hi = min(nv, lo + CHUNK / 16);
            for (int u = lo + tid; u < hi; u += BLOCK) {
                const float4 v = buf[u];
                s += (v.x + v.y) + (v.z + v.w);
            }
        }
        const float mean = block_sum(s, red0) * inv_cols;

        // Pass 2: squared deviations, the row already on chip.
        float d = 0.0f;
        if (has_h) d = fmaf(oh - mean, oh - mean, d);
        if (has_t) d = fmaf(ot - mean, ot - mean, d);
        for (int u = tid; u < nv; u += BLOCK) d += sq_dev(buf[u], mean);
        const float rstd = rsqrtf(block_sum(d, red1) * inv_cols + LN_EPS);

        // Pass 3: write each chunk, then hand it back to the producer.
        const bool vec_wb = head == 0 && wb_aligned;   // uniform per row
        const float4* w4 = reinterpret_cast<const float4*>(weight);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        float4* yb = reinterpret_cast<float4*>(yr + head);
        float* ys = yr + head;
        for (int i = 0; i < nch; ++i) {
            const int lo = i * (CHUNK / 16), hi = min(nv, lo + CHUNK / 16);
            for (int u = lo + tid; u < hi; u += BLOCK) {
                const float4 v = buf[u];
                float4 w, b;
                if (vec_wb) {
                    w = w4[u];
                    b = b4[u];
                } else {
                    const int c = head + 4 * u;
                    w = make_float4(weight[c], weight[c + 1], weight[c + 2], weight[c + 3]);
                    b = make_float4(bias[c], bias[c + 1], bias[c + 2], bias[c + 3]);
                }
                const float4 e = make_float4(fmaf((v.x - mean) * rstd, w.x, b.x), fmaf((v.y - mean) * rstd, w.y, b.y),
                                             fmaf((v.z - mean) * rstd, w.z, b.z), fmaf((v.w - mean) * rstd, w.w, b.w));
                if (y_aligned) {
                    __stcs(yb + u, e);
                } else {
                    ys[4 * u] = e.x;
                    ys[4 * u + 1] = e.y;
                    ys[4 * u + 2] = e.z;
                    ys[4 * u + 3] = e.w;
                }
            }
            __syncwarp();
            if ((tid & 31) == 0) arrive(smem_addr(&empty[i]));
        }
        if (has_h) yr[tid] = fmaf((oh - mean) * rstd, weight[tid], bias[tid]);
        if (has_t) yr[tail0 + tid] = fmaf((ot - mean) * rstd, weight[tail0 + tid], bias[tail0 + tid]);
    }
}
