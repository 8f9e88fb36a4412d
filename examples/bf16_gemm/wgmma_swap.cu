// bf16_gemm_wgmma_swap: a decode step (M <= 64) on wgmma with the operands swapped.
// wgmma's M is 64, so a GEMM of 16 rows multiplies 48 rows of zeros in every tile of the
// usual form (wgmma_ws2 at BM = 64). Here the tensor core computes C^T = B^T A^T: 64
// columns of C are wgmma's M (B read N-major straight from its row-major layout, the
// transpose-A bit) and MN rows of C are its N (16, 32 or 64: A read K-major, as it lies),
// so nothing is multiplied for nothing and a tile is 64 columns wide: 8192 columns are 128
// tiles of one consumer, about one per SM, where 64-row tiles of 256 columns are 32.
//   C = A @ B; A M x K, B K x N, C M x N, row-major bf16, fp32 accumulation. M any size,
//   N and K multiples of 8 (the descriptors' 16-byte strides).
//
// Launch rule (a program of one step, after the workspace's zeroing):
//   grid   = ceil_div(M, MN) * ceil_div(N, 64 * NC) * SPLITK      one CTA per (tile, K slice)
//   block  = 128 * NC + 32                                          NC consumer warpgroups, one producer warp
//   shared = STAGES * (MN * 128 + NC * 8192) + 1024                 the ring (1 KiB of alignment slack)
//   args   tma:A (box MN x 64, 128B swizzle), tma:B (box 64 x 64, 128B swizzle), C, partial, counters, M, N, K
//
// The producer warp (its lane 0) keeps a STAGES-deep ring full with TMA: per stage one A
// box (MN rows x 64 K) and NC B boxes (64 K x 64 columns), rows and columns past the
// arrays zero-filled by the copy engine. Consumer c multiplies its 64 columns: per 16 K,
// one wgmma m64nMNk16 (A operand: its B box, MN-major; B operand: the A box, K-major),
// one group in flight, releasing each stage when the next group is issued.
//
// Split-K (SPLITK > 1): each (tile, slice) writes its fp32 partial (fragment order,
// float4s) to its own workspace slot and counts itself on the tile's counter; the CTA
// that arrives last adds every slot in slice order (its own from registers), so the sum
// is the same whichever CTA is last, resets the counter and stores. Nobody waits for
// another CTA: no co-residency assumption.
//
// Epilogue: the accumulator holds C^T; each thread stores its elements of C as bf16 (the
// tile is MN x 64 NC values, a few KiB), columns past N and rows past M skipped.
// Uses wgmma, so warpsmith compiles it for sm_90a.
#include <cuda_bf16.h>

// knob MN: 16 32 64
#ifndef MN
#define MN 16
#endif
// knob NC: 1 2
#ifndef NC
#define NC 1
#endif
// knob STAGES: 8 6 4 12
#ifndef STAGES
#define STAGES 8
#endif
// knob SPLITK: 1 2 4
#ifndef SPLITK
#define SPLITK 1
#endif

#define BK 64                      // one 128-byte swizzle row of bf16 along K
#define THREADS (128 * NC + 32)    // consumers first (warpgroups must start at a warp multiple of 4)
#define A_STAGE (MN * BK * 2)      // bytes: MN rows of A
#define B_BOX (BK * 64 * 2)        // 64 K rows x 64 columns of B
#define B_STAGE (NC * B_BOX)
#define ACC (MN / 2)               // fp32 accumulators a thread (m64nMN: 64 x MN over 128 threads)
#define SMEM_BYTES (STAGES * (A_STAGE + B_STAGE) + 1024)

static_assert(MN == 16 || MN == 32 || MN == 64, "MN is 16, 32 or 64");
static_assert(NC == 1 || NC == 2, "one or two consumer warpgroups");
static_assert(STAGES >= 2, "at least two stages");
static_assert(SPLITK >= 1 && SPLITK <= 16, "SPLITK is 1 to 16");
static_assert(SMEM_BYTES <= 227 * 1024 - 128, "the ring exceeds the 227 KiB opt-in shared memory");

struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

// d += A' B' with A' the MN-major B box (transpose-A bit 1) and B' the K-major A box (transpose-B bit 0).
#if MN == 16
#define WGMMA_STEP(d, da, db) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 1, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
                 : "l"(da), "l"(db))
#elif MN == 32
#define WGMMA_STEP(d, da, db) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
                 : "l"(da), "l"(db))
#else
#define WGMMA_STEP(d, da, db) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                 : "l"(da), "l"(db))
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A wgmma shared-memory descriptor, 128-byte swizzle: start, leading and stride byte
// offsets in 16-byte units. Both operands here have 1024 bytes between 8-row groups (of
// K rows for the MN-major B box, of MN rows for the K-major A box); the leading offset is
// unused (one 64-element swizzle atom across).
__device__ __forceinline__ unsigned long long descriptor(unsigned addr)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(16 >> 4) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap* map, int x, int y, unsigned bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// A named barrier over the consumers (id 1; the producer warp never joins it).
__device__ __forceinline__ void consumers_sync()
{
    asm volatile("bar.sync 1, %0;\n" ::"n"(128 * NC) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
bf16_gemm_wgmma_swap(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                     __nv_bfloat16* __restrict__ C, float* __restrict__ partial, int* __restrict__ counters,
                     int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
#if SPLITK > 1
    __shared__ int last_flag;  // whether this CTA finishes its tile
#endif
    // 128-byte swizzled boxes start on a 1024-byte boundary (the launch adds 1 KiB of slack).
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned a_boxes = base, b_boxes = base + STAGES * A_STAGE;

    const int tiles_n = (N + 64 * NC - 1) / (64 * NC);
    const int unit = blockIdx.x, t = unit / SPLITK, slice = unit % SPLITK;
    const int bm = (t / tiles_n) * MN, bn = (t % tiles_n) * 64 * NC;
    const int ktiles = (K + BK - 1) / BK;
    const int k0 = (int)((long long)slice * ktiles / SPLITK), k1 = (int)((long long)(slice + 1) * ktiles / SPLITK);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&full[s])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(&empty[s])), "n"(NC));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    if (threadIdx.x >= 128 * NC) {  // the producer warp
        if (threadIdx.x == 128 * NC) {
            int s = 0;
            unsigned phase = 0;
            for (int kt = k0; kt < k1; ++kt) {
                const unsigned bar = smem_addr(&full[s]);
                if (kt - k0 >= STAGES)  // every consumer is done with what this stage held
                    wait_phase(smem_addr(&empty[s]), phase ^ 1);
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                             ::"r"(bar), "r"(A_STAGE + B_STAGE) : "memory");
                tma_load(a_boxes + s * A_STAGE, &a_map, kt * BK, bm, bar);  // (column, row)
#pragma unroll
                for (int c = 0; c < NC; ++c)
                    tma_load(b_boxes + s * B_STAGE + c * B_BOX, &b_map, bn + c * 64, kt * BK, bar);
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    const int c = threadIdx.x / 128;  // this consumer's 64 columns: bn + 64 c ..
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    float d[ACC];
#pragma unroll
    for (int j = 0; j < ACC; ++j) d[j] = 0.0f;

    int s = 0, prev = -1;  // ring stage; the stage whose wgmma group is still in flight
    unsigned phase = 0;
    for (int kt = k0; kt < k1; ++kt) {
        wait_phase(smem_addr(&full[s]), phase);
        const unsigned a_box = a_boxes + s * A_STAGE, b_box = b_boxes + s * B_STAGE + c * B_BOX;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            // MN-major B box: the next 16 K rows are two 8-row groups (2048 bytes) down;
            // K-major A box: the next 16 K columns are 32 bytes into each 128-byte row.
            WGMMA_STEP(d, descriptor(b_box + kk * 2048), descriptor(a_box + kk * 32));
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // The group before this one has retired: its stage may be refilled.
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (prev >= 0 && tid == 0)
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(&empty[prev])) : "memory");
        prev = s;
        if (++s == STAGES) {
            s = 0;
            phase ^= 1;
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");

#if SPLITK > 1
    {
        // Slot of (tile t, slice o): 64 NC x MN floats, float4 q of thread tid of consumer c at
        // (c * (ACC / 4) + q) * 128 + tid.
        float4* const mine = reinterpret_cast<float4*>(partial) + (long long)t * SPLITK * (16 * NC * MN) +
                             c * (ACC / 4) * 128 + tid;
#pragma unroll
        for (int q = 0; q < ACC / 4; ++q)
            __stcg(mine + slice * (16 * NC * MN) + q * 128, make_float4(d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3]));
        __threadfence();
        consumers_sync();  // every consumer's partials are written and fenced
        if (threadIdx.x == 0) {
            const int arrived = atomicAdd(counters + t, 1);
            const int last = arrived == SPLITK - 1;
            if (last)
                counters[t] = 0;  // every slice has counted: ready for the next launch
            __threadfence();
            last_flag = last;
        }
        consumers_sync();
        if (!last_flag)
            return;  // another slice's CTA finishes this tile
        __threadfence();
        float sum[ACC];
#pragma unroll
        for (int j = 0; j < ACC; ++j) sum[j] = 0.0f;
#pragma unroll 1
        for (int o = 0; o < SPLITK; ++o) {  // slice order, whichever CTA is last
#pragma unroll
            for (int q = 0; q < ACC / 4; ++q) {
                const float4 v = o == slice ? make_float4(d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3])
                                            : __ldcg(mine + o * (16 * NC * MN) + q * 128);
                sum[4 * q] += v.x;
                sum[4 * q + 1] += v.y;
                sum[4 * q + 2] += v.z;
                sum[4 * q + 3] += v.w;
            }
        }
#pragma unroll
        for (int j = 0; j < ACC; ++j) d[j] = sum[j];
    }
#endif

    // Accumulator layout (m64nMN of C^T): d[4j + {0,1}] at C^T row 16 warp + lane / 4 (a
    // column of C), C^T columns 8j + 2 (lane % 4) + {0, 1} (rows of C); d[4j + {2,3}] eight
    // C^T rows further.
#pragma unroll
    for (int j = 0; j < MN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = bn + c * 64 + warp * 16 + (e / 2) * 8 + lane / 4;
            const int m = bm + 8 * j + 2 * (lane % 4) + (e % 2);
            if (m < M && n < N)
                C[(long long)m * N + n] = __float2bfloat16_rn(d[4 * j + e]);
        }
}
