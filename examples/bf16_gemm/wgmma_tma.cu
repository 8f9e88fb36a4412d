// Hopper's own path: TMA bulk copies feed a STAGES-deep ring of shared-memory tiles
// (128-byte swizzled, out-of-bounds boxes zero-filled by the copy engine), and each
// warpgroup multiplies its 64 rows of the BM x BN block tile with wgmma (bf16 in,
// fp32 accumulate, B read N-major straight from its row-major layout). One thread
// issues the copies; an mbarrier per stage says when a stage has landed. Every
// thread computes (no producer warp yet): the copies for the next STAGES-1 tiles are
// in flight while the current one is multiplied. Uses wgmma, so warpsmith compiles it
// for sm_90a. The runner builds both descriptors (workload.toml: tma:A, tma:B).
#include <cuda_bf16.h>

// knob BM: 64 128
#ifndef BM
#define BM 128
#endif
// knob BN: 64 128 256
#ifndef BN
#define BN 128
#endif
// knob STAGES: 2 3 4 5
#ifndef STAGES
#define STAGES 4
#endif

#define BK 64                   // one 128-byte swizzle row of bf16 along K
#define THREADS (BM / 64 * 128)  // one warpgroup per 64 rows
#define A_STAGE (BM * BK * 2)    // bytes
#define B_STAGE (BK * BN * 2)
#define B_BOX (BK * 64 * 2)      // one 64 x 64 box of B: the N-major swizzle atom repeats every 64 columns

static_assert(BM % 64 == 0 && BN % 64 == 0 && STAGES >= 2, "BM, BN multiples of 64; at least two stages");

struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

#if BN == 64
#define WGMMA_STEP(d, da, db) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " \
        "{" \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
        "}, %32, %33, p, 1, 1, 0, 1;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
        : "l"(da), "l"(db))
#elif BN == 128
#define WGMMA_STEP(d, da, db) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " \
        "{" \
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
#elif BN == 256
#define WGMMA_STEP(d, da, db) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " \
        "{" \
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

__device__ __forceinline__ void load_tile(const CUtensorMap* a, const CUtensorMap* b, unsigned a_dst,
                                          unsigned b_dst, unsigned bar, int bm, int bn, int k0)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(A_STAGE + B_STAGE)
                 : "memory");
    tma_load(a_dst, a, k0, bm, bar);  // coordinates innermost first: (column, row)
#pragma unroll
    for (int j = 0; j < BN / 64; ++j)
        tma_load(b_dst + j * B_BOX, b, bn + j * 64, k0, bar);
}

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS)
bf16_gemm_wgmma(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __shared__ alignas(8) unsigned long long full[STAGES];
    // 128-byte swizzled tiles must start on a 1024-byte boundary (the launch adds 1 KiB of slack).
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned a_tiles = base, b_tiles = base + STAGES * A_STAGE;

    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int tiles = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&full[s])));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        for (int s = 0; s < STAGES - 1 && s < tiles; ++s)
            load_tile(&a_map, &b_map, a_tiles + s * A_STAGE, b_tiles + s * B_STAGE, smem_addr(&full[s]), bm, bn,
                      s * BK);
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;

    for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES;
        // Refill the stage multiplied last iteration (every warpgroup waited for its
        // wgmma and passed the barrier below, so nobody still reads it).
        const int next = t + STAGES - 1;
        if (threadIdx.x == 0 && next < tiles)
            load_tile(&a_map, &b_map, a_tiles + (next % STAGES) * A_STAGE, b_tiles + (next % STAGES) * B_STAGE,
                      smem_addr(&full[next % STAGES]), bm, bn, next * BK);
        wait_phase(smem_addr(&full[s]), (t / STAGES) & 1);

        const unsigned a_stage = a_tiles + s * A_STAGE + wg * 64 * BK * 2, b_stage = b_tiles + s * B_STAGE;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            // K-major A: the next 16 columns are 32 bytes into the swizzled row;
            // N-major B: the next 16 rows are two 8-row groups (2048 bytes) down.
            const unsigned long long da = descriptor(a_stage + kk * 32, 16, 1024);
            const unsigned long long db = descriptor(b_stage + kk * 2048, B_BOX, 1024);
            WGMMA_STEP(d, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        __syncthreads();
    }

    // Accumulator layout (per warpgroup, m64nBN): d[4j + {0,1}] at row 16 * warp + lane / 4,
    // columns 8j + 2 (lane % 4) + {0, 1}; d[4j + {2,3}] eight rows below.
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int row0 = bm + wg * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = bn + j * 8 + (lane % 4) * 2;
        if (col >= N) continue;  // N is a multiple of 8: both columns of the pair are in or out
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + h * 8;
            if (row < M)
                *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col) =
                    __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        }
    }
}
