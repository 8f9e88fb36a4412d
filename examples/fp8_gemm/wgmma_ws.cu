// Warp-specialised Hopper fp8 GEMM, C = scale_a * scale_b * (A @ B^T): one producer
// warpgroup issues the TMA copies, two consumer warpgroups multiply with
// wgmma.m64nBNk32.f32.e4m3.e4m3. The block is 384 threads: warpgroup 0 gives registers
// back (setmaxnreg.dec) and one of its threads keeps a STAGES-deep ring of 128-byte
// swizzled A and B tiles full; warpgroups 1 and 2 take registers (setmaxnreg.inc) and
// each owns BM / 2 rows of the BM x BN block tile. fp8 wgmma reads both operands
// K-major, which is how A (M x K) and B (N x K) are stored: a stage is BM and BN rows
// of BK = 128 bytes, one TMA box each, with no transpose anywhere.
//
// Two-level accumulation (DeepGEMM's): Hopper's fp8 wgmma keeps only about 14 bits when
// it adds a k32 slice into its accumulator, which drifts past the tolerance at long K
// (benchmarks/fp8_tolerance_study.py: 3.5 u of bfloat16 at K = 14336 where the rtol is
// 2 u, and the accumulation probe's 2^22 ones stall). With PROMOTE = P > 0 the wgmma
// accumulator restarts every P k-blocks (P x 128 elements of K; scale-d = 0 on the
// window's first wgmma) and is added into a second set of fp32 registers with FADDs;
// PROMOTE = 0 keeps one accumulator for the whole K (cheaper, and wrong at long K on
// real hardware if the report is right). The promoted sum costs registers: each
// consumer thread holds 2 x MT x BN / 2 fp32 values, at most 128.
//
// Each stage has two mbarriers: full (the producer's expect_tx, completed by the copy
// engine) and empty (one arrival per consumer warpgroup, per CTA of the cluster, once
// the wgmma that read the stage has retired; a consumer keeps one wgmma group in flight,
// none across a promotion). The grid is persistent (PERSISTENT=1: at most SMS CTAs walk
// the tiles) or one CTA per tile; tiles are visited GROUP rows of tiles at a time for L2
// reuse. With CLUSTER=2 two CTAs on neighbouring M tiles of the same N tile form a
// cluster and each loads half of the shared B tile's rows, multicast to both.
// Epilogue: the fp32 sum times scale_a[0] * scale_b[0] (read once per CTA), rounded to
// bf16 pairs stored straight from the registers, rows and columns guarded (M is any
// size; N and K multiples of 16; every edge box of the copies is zero-filled, and a zero
// byte is +0 in e4m3). The structure is bf16_gemm's wgmma_ws.cu, verified on the GPU.
// Uses wgmma and setmaxnreg, so warpsmith compiles it for sm_90a.
#include <cuda_bf16.h>

// knob BM: 128 256
#ifndef BM
#define BM 128
#endif
// knob BN: 128 64 256
#ifndef BN
#define BN 128
#endif
// knob STAGES: 6 4 5 7
#ifndef STAGES
#define STAGES 6
#endif
// knob PROMOTE: 1 2 4 0
#ifndef PROMOTE
#define PROMOTE 1
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
// knob CLUSTER: 1 2
#ifndef CLUSTER
#define CLUSTER 1
#endif

#define BK 128                 // one 128-byte swizzle row of fp8 along K
#define WM (BM / 2)            // rows per consumer warpgroup
#define MT (WM / 64)           // m64 wgmmas per consumer per k32 step
#define THREADS 384            // producer + two consumers
#define A_STAGE (BM * BK)      // bytes
#define B_STAGE (BN * BK)
#define B_SHARE (B_STAGE / CLUSTER)  // the rows of a B tile each CTA of a cluster loads
#define PRODUCER_REGS 40
#define CONSUMER_REGS 232      // 128 x 40 + 256 x 232 <= 65536

static_assert(BM == 128 || BM == 256, "BM is 128 or 256: two consumers of 64 or 128 rows");
static_assert(BN == 64 || BN == 128 || BN == 256, "BN is 64, 128 or 256");
static_assert(MT * BN / 2 * (PROMOTE > 0 ? 2 : 1) <= 128,
              "at most 128 fp32 accumulators per consumer thread, the promoted sum included");
static_assert(STAGES >= 2, "at least two stages");
static_assert(STAGES * (A_STAGE + B_STAGE) + 1024 <= 227 * 1024, "the ring exceeds the 227 KiB opt-in shared memory");
static_assert(CLUSTER == 1 || CLUSTER == 2, "CLUSTER is 1 or 2");
static_assert(PROMOTE >= 0, "PROMOTE counts k-blocks between promotions; 0 never promotes");

struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

// One wgmma of a consumer's m64 x BN slice over k32: d = A * B + (scale_d ? d : 0).
#define WGMMA_N64(d, da, db, scale_d) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
        "}, %32, %33, p, 1, 1;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
        : "l"(da), "l"(db), "r"(scale_d))

#define WGMMA_N128(d, da, db, scale_d) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
        "}, %64, %65, p, 1, 1;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
        : "l"(da), "l"(db), "r"(scale_d))

#define WGMMA_N256(d, da, db, scale_d) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
        "}, %128, %129, p, 1, 1;\n}\n" \
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
        : "l"(da), "l"(db), "r"(scale_d))

#if BN == 64
#define WGMMA_STEP WGMMA_N64
#elif BN == 128
#define WGMMA_STEP WGMMA_N128
#else
#define WGMMA_STEP WGMMA_N256
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A wgmma shared-memory descriptor of a K-major tile with 128-byte swizzle: start
// address, and 1024 B (eight 128-byte rows) between 8-row groups; the leading offset is
// unused (a k32 slice of fp8 is 32 bytes, inside one swizzle row).
__device__ __forceinline__ unsigned long long descriptor(unsigned addr)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap* map, int x, int y, unsigned bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}

// The same box written at the same shared offset, and completing the mbarrier at the
// same offset, in every CTA of the cluster named in mask.
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const CUtensorMap* map, int x, int y, unsigned bar,
                                                   unsigned short mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar), "h"(mask)
                 : "memory");
}

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// One arrival on the empty barrier at this offset in every CTA of the cluster (itself included).
__device__ __forceinline__ void release_stage(unsigned bar)
{
#if CLUSTER == 1
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
#pragma unroll
    for (unsigned r = 0; r < CLUSTER; ++r)
        asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                     "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n"
                     ::"r"(bar), "r"(r) : "memory");
#endif
}

__device__ __forceinline__ void cluster_sync()
{
#if CLUSTER > 1
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#else
    __syncthreads();
#endif
}

__device__ __forceinline__ unsigned cluster_rank()
{
#if CLUSTER > 1
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
#else
    return 0;
#endif
}

// Tile order: a unit is CLUSTER vertically adjacent M tiles of one N tile. Units are
// numbered GROUP unit-rows at a time, down the rows first, so the CTAs running at
// once share few rows of A and few rows of B in L2.
__device__ __forceinline__ void unit_tile(int u, int unit_rows, int tiles_n, int& um, int& tn)
{
    const int per_group = GROUP * tiles_n;
    const int first = (u / per_group) * GROUP;
    const int rows = min(unit_rows - first, GROUP);
    const int v = u % per_group;
    um = first + v % rows;
    tn = v / rows;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
fp8_gemm_wgmma_ws(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                  const float* __restrict__ scale_a, const float* __restrict__ scale_b,
                  __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
    // 128-byte swizzled tiles must start on a 1024-byte boundary (the launch adds 1 KiB
    // of slack). The offset is the same in every CTA: multicast relies on it.
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_STAGE;

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int unit_rows = (tiles_m + CLUSTER - 1) / CLUSTER;
    const int units = unit_rows * tiles_n;
    const int ktiles = (K + BK - 1) / BK;
    const int first_unit = blockIdx.x / CLUSTER, unit_stride = gridDim.x / CLUSTER;
    const unsigned rank = cluster_rank();

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&full[s])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(&empty[s])), "r"(2 * CLUSTER));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    // Every CTA of the cluster has its barriers initialised before anyone copies into
    // or arrives on them.
    cluster_sync();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (threadIdx.x == 0) {
            int s = 0;
            unsigned phase = 0;
            bool wrapped = false;  // false while the ring's first STAGES slots are still unused
            for (int u = first_unit; u < units; u += unit_stride) {
                int um, tn;
                unit_tile(u, unit_rows, tiles_n, um, tn);
                const int bm = (um * CLUSTER + rank) * BM, bn = tn * BN;
                for (int kt = 0; kt < ktiles; ++kt) {
                    const unsigned bar = smem_addr(&full[s]);
                    if (wrapped)  // the consumers of every CTA that this stage is written in are done with it
                        wait_phase(smem_addr(&empty[s]), phase ^ 1);
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                                 ::"r"(bar), "r"(A_STAGE + B_STAGE) : "memory");
                    tma_load(a_tiles + s * A_STAGE, &a_map, kt * BK, bm, bar);  // (column, row)
#if CLUSTER == 1
                    tma_load(b_tiles + s * B_STAGE, &b_map, kt * BK, bn, bar);
#else
                    tma_load_multicast(b_tiles + s * B_STAGE + rank * B_SHARE, &b_map, kt * BK,
                                       bn + rank * (BN / CLUSTER), bar, (unsigned short)((1u << CLUSTER) - 1));
#endif
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                        wrapped = true;
                    }
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        const int c = wg - 1;  // this consumer's rows: c * WM .. c * WM + WM - 1 of the block tile
        const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
        const float scale = scale_a[0] * scale_b[0];
        // The wgmma accumulators; each tile's first wgmma (scale-d = 0) overwrites them.
        float d[MT][BN / 2];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < BN / 2; ++j) d[i][j] = 0.0f;
#if PROMOTE > 0
        float sum[MT][BN / 2];  // the promoted fp32 sum
#define RESULT sum
#else
#define RESULT d
#endif
        int s = 0;
        unsigned phase = 0;
        for (int u = first_unit; u < units; u += unit_stride) {
            int um, tn;
            unit_tile(u, unit_rows, tiles_n, um, tn);
            const int bm = (um * CLUSTER + rank) * BM, bn = tn * BN;
#if PROMOTE > 0
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < BN / 2; ++j) sum[i][j] = 0.0f;
#endif

            int prev = -1;  // the stage whose wgmma group is still in flight
            for (int kt = 0; kt < ktiles; ++kt) {
                wait_phase(smem_addr(&full[s]), phase);
                const unsigned a_stage = a_tiles + s * A_STAGE + c * WM * BK, b_stage = b_tiles + s * B_STAGE;
#if PROMOTE > 0
                const bool restart = kt % PROMOTE == 0;  // a promotion window's first k-block
                const bool promote = (kt + 1) % PROMOTE == 0 || kt + 1 == ktiles;
#else
                const bool restart = kt == 0, promote = false;
#endif
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < BK / 32; ++kk) {
                    // The next 32 bytes of K are 32 bytes into each swizzled row, in A and B alike.
                    const unsigned long long db = descriptor(b_stage + kk * 32);
#pragma unroll
                    for (int i = 0; i < MT; ++i) {
                        // 64 rows further down A is 64 x 128 bytes.
                        const unsigned long long da = descriptor(a_stage + i * 64 * BK + kk * 32);
                        WGMMA_STEP(d[i], da, db, (unsigned)(kk > 0 || !restart));
                    }
                }
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                if (promote) {
                    // Every wgmma of the window has retired: its sum joins the fp32 one, and
                    // both stages in flight may be refilled.
                    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#if PROMOTE > 0
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int j = 0; j < BN / 2; ++j) sum[i][j] += d[i][j];
#endif
                    if (threadIdx.x % 128 == 0) {
                        if (prev >= 0)
                            release_stage(smem_addr(&empty[prev]));
                        release_stage(smem_addr(&empty[s]));
                    }
                    prev = -1;
                } else {
                    // The group before this one has retired: its stage may be refilled.
                    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                    if (prev >= 0 && threadIdx.x % 128 == 0)
                        release_stage(smem_addr(&empty[prev]));
                    prev = s;
                }
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            if (prev >= 0 && threadIdx.x % 128 == 0)
                release_stage(smem_addr(&empty[prev]));

            // Accumulator layout (m64nBN): RESULT[i][4j + {0,1}] at row 16 * warp + lane / 4 of
            // the i-th 64 rows, columns 8j + 2 (lane % 4) + {0, 1}; [4j + {2,3}] eight rows below.
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int row0 = bm + c * WM + i * 64 + warp * 16 + lane / 4;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    const int col = bn + j * 8 + (lane % 4) * 2;
                    if (col >= N) continue;  // N is a multiple of 16: both columns of the pair are in or out
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = row0 + h * 8;
                        if (row < M)
                            *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col) = __floats2bfloat162_rn(
                                RESULT[i][4 * j + 2 * h] * scale, RESULT[i][4 * j + 2 * h + 1] * scale);
                    }
                }
            }
        }
    }
#if CLUSTER > 1
    // No CTA leaves while its peer may still arrive on its barriers or copy into it.
    __syncwarp();
    cluster_sync();
#endif
}
