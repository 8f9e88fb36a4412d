// Warp-specialised Hopper GEMM, second version (wgmma_ws.cu is the first, kept
// unchanged for comparison). One producer warpgroup keeps a STAGES-deep ring of
// 128-byte swizzled A and B tiles full with TMA; NC consumer warpgroups (two, or one
// at BM = 64) each own BM / NC rows of the BM x BN tile and multiply with wgmma
// m64nBNk16 (fp32 accumulators in registers, one wgmma group in flight). The grid is persistent
// (PERSISTENT=1: at most SMS CTAs walk the work units) or one CTA per unit, units
// visited GROUP rows of tiles at a time for L2 reuse. The producer runs ahead across
// units: it only waits on the ring's empty barriers, which the consumers release
// stage by stage, so the next unit's loads overlap this unit's epilogue.
//
// What changed from wgmma_ws:
// - Epilogue through shared memory and a TMA store. Each consumer converts its
//   accumulators to bf16 into 64 x 64 staging boxes (128-byte swizzle: the fragment
//   writes are bank-conflict free), fences the generic proxy against the async one
//   (fence.proxy.async), syncs its warpgroup on a named barrier, and one thread
//   stores the box with cp.async.bulk.tensor (C's descriptor, box 64x64, 128B
//   swizzle; rows past M and columns past N are clipped by the copy engine) and goes
//   straight back to multiplying. CBUF boxes per consumer form a ring: before a box
//   is rewritten its old store must have finished reading shared memory
//   (cp.async.bulk.wait_group.read CBUF - 1). The last stores are waited for at exit.
// - Split-K over the persistent grid (SPLITK > 1, for few-tile shapes): a unit is a
//   (tile, K slice); each writes its fp32 partial tile (in the accumulator-fragment
//   order, coalesced float4) to its own workspace slot, fences and counts itself on
//   the tile's counter (atomicAdd). The CTA that arrives last adds the other slices'
//   partials to its registers, resets the counter and runs the epilogue. Nobody
//   waits for another CTA, so there is no co-residency assumption and no deadlock.
// - No clusters (CLUSTER=2 was slower on wgmma_ws).
// - BM = 64 (one consumer warpgroup, 256 threads): for few rows (a decode step, M <= 64)
//   a 128-row tile multiplies at least half zero rows and its A stage costs twice the
//   shared memory; at 64 x 256 a stage is 40 KiB, so more of the ring holds B, which is
//   what such a shape streams. With SPLITK it spreads K over the grid.
// Ragged sizes: every edge box of the loads is zero-filled and of the stores clipped;
// M is any size, N and K multiples of 8. Conventions as in wgmma_tma.cu / wgmma_ws.cu:
// K-major A, N-major B (wgmma's transpose-B bit) from its row-major layout.
// Uses wgmma and setmaxnreg, so warpsmith compiles it for sm_90a.
#include <cuda_bf16.h>

// knob BM: 64 128 256
#ifndef BM
#define BM 128
#endif
// knob BN: 256 128
#ifndef BN
#define BN 256
#endif
// knob STAGES: 4 3 5 6 8
#ifndef STAGES
#define STAGES 4
#endif
// knob CBUF: 2 1 4
#ifndef CBUF
#define CBUF 2  // 64 x 64 bf16 staging boxes per consumer (8 KiB each)
#endif
// knob SPLITK: 1 2 4 3
#ifndef SPLITK
#define SPLITK 1
#endif
// knob GROUP: 16 8 32 4
#ifndef GROUP
#define GROUP 16
#endif
// knob PERSISTENT: 1 0
#ifndef PERSISTENT
#define PERSISTENT 1
#endif
// knob SMS: 132 128
#ifndef SMS
#define SMS 132  // the H200's SM count: the persistent grid's size (launch rule only)
#endif

#define BK 64                  // one 128-byte swizzle row of bf16 along K
#define NC (BM == 64 ? 1 : 2)  // consumer warpgroups
#define WM (BM / NC)           // rows per consumer warpgroup
#define MT (WM / 64)           // m64 wgmmas per consumer per k16 step
#define THREADS (128 * (1 + NC))  // producer + consumers
#define A_STAGE (BM * BK * 2)  // bytes
#define B_STAGE (BK * BN * 2)
#define B_BOX (BK * 64 * 2)    // one 64 x 64 box of B: the N-major swizzle atom repeats every 64 columns
#define B_BOXES (BN / 64)
#define C_BOX (64 * 64 * 2)    // one 64 x 64 bf16 staging box of C
#define SMEM_BYTES (STAGES * (A_STAGE + B_STAGE) + NC * CBUF * C_BOX + 1024)
#define PRODUCER_REGS 40
#define CONSUMER_REGS 232      // 128 x 40 + 256 x 232 <= 65536

static_assert(BM == 64 || BM == 128 || BM == 256, "BM is 64 (one consumer), 128 or 256 (two of 64 or 128 rows)");
static_assert(BN == 128 || BN == 256, "BN is 128 or 256");
static_assert(MT * BN / 2 <= 128, "at most 128 fp32 accumulators per thread: BM x BN <= 128 x 256");
static_assert(STAGES >= 2, "at least two stages");
static_assert(CBUF >= 1 && CBUF <= MT * BN / 64, "1 to (a consumer's boxes per tile) staging boxes");
static_assert(SPLITK >= 1 && SPLITK <= 16, "SPLITK is 1 to 16");
static_assert(SMEM_BYTES <= 227 * 1024 - 128, "ring + staging exceed the 227 KiB opt-in shared memory");

struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

#define WGMMA_N128(d, da, db) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
        "}, %64, %65, p, 1, 1, 0, 1;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
        : "l"(da), "l"(db))

#define WGMMA_N256(d, da, db) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
        "}, %128, %129, p, 1, 1, 0, 1;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
        : "l"(da), "l"(db))

#if BN == 128
#define WGMMA_STEP WGMMA_N128
#else
#define WGMMA_STEP WGMMA_N256
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A wgmma shared-memory descriptor, 128-byte swizzle: start, leading and stride
// byte offsets in 16-byte units. K-major A: stride 1024 B between 8-row groups
// (leading unused). N-major B: leading = B_BOX between 64-column atoms, stride
// 1024 B between groups of 8 K rows.
__device__ __forceinline__ unsigned long long descriptor(unsigned addr, unsigned leading, unsigned stride)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(leading >> 4) << 16) |
           ((unsigned long long)(stride >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap* map, int x, int y, unsigned bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}

// Shared -> global box store at (column x, row y); the copy engine clips the box at the array's edges.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, unsigned src, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(src)
                 : "memory");
}

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// A named barrier over `count` threads (ids 1, 2: one consumer warpgroup; 3: all of them).
__device__ __forceinline__ void named_sync(unsigned id, unsigned count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Tile order: tiles are numbered GROUP tile-rows at a time, down the rows first, so
// the CTAs running at once share few rows of A and few columns of B in L2. A work
// unit is a (tile, K slice); the slices of one tile are consecutive units.
__device__ __forceinline__ void unit_tile(int t, int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int per_group = GROUP * tiles_n;
    const int first = (t / per_group) * GROUP;
    const int rows = min(tiles_m - first, GROUP);
    const int v = t % per_group;
    tm = first + v % rows;
    tn = v / rows;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
bf16_gemm_wgmma_ws2(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                    const __grid_constant__ CUtensorMap c_map, float* __restrict__ partial,
                    int* __restrict__ counters, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
#if SPLITK > 1
    __shared__ int last_flag;  // whether this CTA finishes the tile of its unit
#endif
    // 128-byte swizzled tiles must start on a 1024-byte boundary (the launch adds 1 KiB of slack).
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_STAGE;
    const unsigned c_tiles = b_tiles + STAGES * B_STAGE;

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int units = tiles_m * tiles_n * SPLITK;
    const int ktiles = (K + BK - 1) / BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&full[s])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(&empty[s])), "n"(NC));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
#if NC == 2  // one consumer has the registers it needs from the launch (no warpgroup to give them to)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
#endif
        if (threadIdx.x == 0) {
            int s = 0;
            unsigned phase = 0;
            bool wrapped = false;  // false while the ring's first STAGES slots are still unused
            for (int u = blockIdx.x; u < units; u += gridDim.x) {
                const int t = u / SPLITK, slice = u % SPLITK;
                int tm, tn;
                unit_tile(t, tiles_m, tiles_n, tm, tn);
                const int bm = tm * BM, bn = tn * BN;
                const int k0 = (int)((long long)slice * ktiles / SPLITK), k1 = (int)((long long)(slice + 1) * ktiles / SPLITK);
                for (int kt = k0; kt < k1; ++kt) {
                    const unsigned bar = smem_addr(&full[s]);
                    if (wrapped)  // every consumer is done with what this stage held
                        wait_phase(smem_addr(&empty[s]), phase ^ 1);
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                                 ::"r"(bar), "r"(A_STAGE + B_STAGE) : "memory");
                    tma_load(a_tiles + s * A_STAGE, &a_map, kt * BK, bm, bar);  // (column, row)
#pragma unroll
                    for (int j = 0; j < B_BOXES; ++j)
                        tma_load(b_tiles + s * B_STAGE + j * B_BOX, &b_map, bn + j * 64, kt * BK, bar);
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                        wrapped = true;
                    }
                }
            }
        }
    } else {
#if NC == 2
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
#endif
        const int c = wg - 1;  // this consumer's rows: c * WM .. c * WM + WM - 1 of the block tile
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const bool lead = tid == 0;  // issues and waits for this consumer's stores
        const unsigned c_stage = c_tiles + c * CBUF * C_BOX;
        float d[MT][BN / 2];
        int s = 0, cb = 0;  // ring stage; next staging box
        unsigned phase = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
            const int t = u / SPLITK, slice = u % SPLITK;
            int tm, tn;
            unit_tile(t, tiles_m, tiles_n, tm, tn);
            const int bm = tm * BM, bn = tn * BN;
            const int k0 = (int)((long long)slice * ktiles / SPLITK), k1 = (int)((long long)(slice + 1) * ktiles / SPLITK);
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < BN / 2; ++j) d[i][j] = 0.0f;

            int prev = -1;  // the stage whose wgmma group is still in flight
            for (int kt = k0; kt < k1; ++kt) {
                wait_phase(smem_addr(&full[s]), phase);
                const unsigned a_stage = a_tiles + s * A_STAGE + c * WM * BK * 2, b_stage = b_tiles + s * B_STAGE;
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk) {
                    // N-major B: the next 16 K rows are two 8-row groups (2048 bytes) down.
                    const unsigned long long db = descriptor(b_stage + kk * 2048, B_BOX, 1024);
#pragma unroll
                    for (int i = 0; i < MT; ++i) {
                        // K-major A: 64 rows further is 64 x 128 bytes; the next 16 columns are 32 bytes into the row.
                        const unsigned long long da = descriptor(a_stage + i * 64 * BK * 2 + kk * 32, 16, 1024);
                        WGMMA_STEP(d[i], da, db);
                    }
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
            if (prev >= 0 && tid == 0)
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(&empty[prev])) : "memory");

#if SPLITK > 1
            // This slice's fp32 partial tile, in fragment order: float4 q of thread tid of
            // consumer c, sub-tile i at ((c * MT + i) * (BN / 8) + q) * 128 + tid of the slot.
            {
                // This thread's first float4 in slice 0's slot of tile t; the rest are constant offsets.
                float4* const mine = reinterpret_cast<float4*>(partial) + (long long)t * SPLITK * (BM * BN / 4) +
                                     c * MT * (BN / 8) * 128 + tid;
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int q = 0; q < BN / 8; ++q)
                        __stcg(mine + slice * (BM * BN / 4) + (i * (BN / 8) + q) * 128,
                               make_float4(d[i][4 * q], d[i][4 * q + 1], d[i][4 * q + 2], d[i][4 * q + 3]));
                __threadfence();
                named_sync(3, 128 * NC);  // every consumer's partials are written and fenced
                if (threadIdx.x == 128) {
                    const int arrived = atomicAdd(counters + t, 1);
                    const int last = arrived == SPLITK - 1;
                    if (last)
                        counters[t] = 0;  // every slice has counted: ready for the next launch
                    __threadfence();
                    last_flag = last;
                }
                named_sync(3, 128 * NC);
                if (!last_flag)
                    continue;  // another slice's CTA finishes this tile
                __threadfence();
#pragma unroll 1
                for (int o = 0; o < SPLITK; ++o) {
                    if (o == slice)
                        continue;
                    const float4* const other = mine + o * (BM * BN / 4);
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int q = 0; q < BN / 8; ++q) {
                            const float4 v = __ldcg(other + (i * (BN / 8) + q) * 128);
                            d[i][4 * q] += v.x;
                            d[i][4 * q + 1] += v.y;
                            d[i][4 * q + 2] += v.z;
                            d[i][4 * q + 3] += v.w;
                        }
                }
            }
#endif

            // Epilogue. Accumulator layout (m64nBN): d[i][4j + {0,1}] at row 16 * warp + lane / 4
            // of the i-th 64 rows, columns 8j + 2 (lane % 4) + {0, 1}; d[i][4j + {2,3}] eight rows
            // below. In a 64 x 64 box with 128-byte swizzle, row r's 16-byte chunk k is stored at
            // chunk k ^ (r % 8): the 8 rows x 4 lanes of one store hit 32 different banks.
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int y = bm + c * WM + i * 64;
#pragma unroll
                for (int jb = 0; jb < BN / 64; ++jb) {
                    const int x = bn + jb * 64;
                    if (y >= M || x >= N)  // the whole box is outside C (the same for the whole warpgroup)
                        continue;
                    if (lead)  // the store that last read this box has finished reading it
                        asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(CBUF - 1) : "memory");
                    named_sync(1 + c, 128);
                    const unsigned box = c_stage + cb * C_BOX;
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) {
                        const int j = jb * 8 + jj;
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = warp * 16 + h * 8 + lane / 4;
                            const __nv_bfloat162 v = __floats2bfloat162_rn(d[i][4 * j + 2 * h], d[i][4 * j + 2 * h + 1]);
                            const unsigned addr = box + r * 128 + ((jj ^ (r & 7)) << 4) + (lane % 4) * 4;
                            asm volatile("st.shared.b32 [%0], %1;\n"
                                         ::"r"(addr), "r"(*reinterpret_cast<const unsigned*>(&v)) : "memory");
                        }
                    }
                    // The generic-proxy writes are made visible to the copy engine, then the whole box is written.
                    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                    named_sync(1 + c, 128);
                    if (lead) {
                        tma_store(&c_map, box, x, y);
                        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
                    }
                    if (++cb == CBUF)
                        cb = 0;
                }
            }
        }
        // Shared memory stays allocated, and C complete, until this consumer's last stores are done.
        if (lead)
            asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    }
}
