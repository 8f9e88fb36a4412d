// Tensor cores through mma.sync.m16n8k32 (e4m3 in, fp32 accumulate): each block
// computes a BM x BN tile of C, each warp a WM x WN piece of it as (WM/16) x (WN/8)
// MMA tiles. K advances BK bytes at a time through a STAGES-deep ring of shared-memory
// tiles filled by cp.async (16-byte chunks; chunks past M, N or K are zero-filled, and a
// zero byte is +0 in e4m3, which is why K must be a multiple of 16). A (M x K) and B
// (N x K) are both K-major, as the MMA's row.col operands are: fragments come from
// shared memory with ldmatrix, no transpose (an 8 x 8 matrix of b16 is 8 rows of 16
// fp8 values, and each thread receives the 4 consecutive bytes the e4m3 fragment
// holds). Rows are padded by 16 bytes so the eight row addresses of an ldmatrix fall in
// different banks. sm_90 has no fp8 mma.sync in hardware: ptxas widens each fragment to
// float16 (exact) and issues HMMA.16816.F32, so this rung runs at the 16-bit rate; it is
// the simple tensor-core kernel, wgmma_ws.cu the fast one. The epilogue multiplies by
// scale_a[0] * scale_b[0] and rounds to bfloat16 pairs.
#include <cuda_bf16.h>

// knob BM: 128 64 256
#ifndef BM
#define BM 128
#endif
// knob BN: 128 64 256
#ifndef BN
#define BN 128
#endif
// knob BK: 64 32 128
#ifndef BK
#define BK 64
#endif
// knob WM: 64 32
#ifndef WM
#define WM 64
#endif
// knob WN: 32 64
#ifndef WN
#define WN 32
#endif
// knob STAGES: 3 2 4
#ifndef STAGES
#define STAGES 3
#endif

#define THREADS ((BM / WM) * (BN / WN) * 32)
#define PAD 16
#define RS (BK + PAD)  // row stride of both tiles, bytes
#define MI (WM / 16)
#define NI (WN / 8)

static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 32 == 0, "MMA shapes: WM, WN multiples of 16, BK of 32");
static_assert(THREADS <= 1024, "at most 1024 threads per block");
static_assert(STAGES >= 2, "a pipeline needs at least two stages");

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}

// `rows` rows of a K-major operand (from row r0 of `rows_total`), bytes k0 .. k0 + BK.
template <int ROWS>
__device__ __forceinline__ void load_tile(const unsigned char* __restrict__ X, unsigned char* xs, int rows_total, int K,
                                          int r0, int k0)
{
    for (int c = threadIdx.x; c < ROWS * BK / 16; c += THREADS) {
        const int r = c / (BK / 16), k = (c % (BK / 16)) * 16;
        const bool ok = r0 + r < rows_total && k0 + k < K;
        const unsigned char* src = ok ? X + (long long)(r0 + r) * K + k0 + k : X;
        cp_async16(xs + r * RS + k, src, ok ? 16 : 0);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
fp8_gemm_mma(const unsigned char* __restrict__ A, const unsigned char* __restrict__ B,
             const float* __restrict__ scale_a, const float* __restrict__ scale_b,
             __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* a_tiles = smem;
    unsigned char* b_tiles = smem + STAGES * BM * RS;

    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    const int tiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) {
            load_tile<BM>(A, a_tiles + s * BM * RS, M, K, bm, s * BK);
            load_tile<BN>(B, b_tiles + s * BN * RS, N, K, bn, s * BK);
        }
        asm volatile("cp.async.commit_group;\n");
    }

    for (int t = 0; t < tiles; ++t) {
        // Tile t has landed (at most STAGES-2 younger groups pending); every warp is
        // also done with tile t-1, whose stage the next load overwrites.
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();
        const int next = t + STAGES - 1;
        if (next < tiles) {
            load_tile<BM>(A, a_tiles + (next % STAGES) * BM * RS, M, K, bm, next * BK);
            load_tile<BN>(B, b_tiles + (next % STAGES) * BN * RS, N, K, bn, next * BK);
        }
        asm volatile("cp.async.commit_group;\n");

        const unsigned char* as = a_tiles + (t % STAGES) * BM * RS;
        const unsigned char* bs = b_tiles + (t % STAGES) * BN * RS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 32) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                // Lanes 0-15 address rows 0-15 at byte kk, lanes 16-31 the same rows at kk + 16:
                // registers (rows 0-7, k 0-15), (rows 8-15, k 0-15), (rows 0-7, k 16-31), (rows 8-15, k 16-31).
                const unsigned char* p = as + (wm + i * 16 + (lane & 15)) * RS + kk + (lane >> 4) * 16;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3])
                             : "r"(smem_addr(p)));
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                // Lanes 8q .. 8q + 7 address matrix q: columns j * 8 (q = 0, 1) or j * 8 + 8 (q = 2, 3) of
                // the tile, at byte kk (q even) or kk + 16 (q odd).
                const int q = lane >> 3;
                const unsigned char* p = bs + (wn + j * 8 + (q >> 1) * 8 + (lane & 7)) * RS + kk + (q & 1) * 16;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(bf[j][0]), "=r"(bf[j][1]), "=r"(bf[j + 1][0]), "=r"(bf[j + 1][1])
                             : "r"(smem_addr(p)));
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    asm volatile(
                        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]),
                          "r"(bf[j][1]));
        }
    }
    asm volatile("cp.async.wait_group 0;\n");

    // Accumulator layout: c0,c1 at (lane/4, 2*(lane%4) + {0,1}), c2,c3 eight rows below.
    const float scale = scale_a[0] * scale_b[0];
    const int group = lane / 4, pair = (lane % 4) * 2;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = bn + wn + j * 8 + pair;
            if (col >= N) continue;  // N is a multiple of 16: both columns of the pair are in or out
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = bm + wm + i * 16 + group + h * 8;
                if (row < M)
                    *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col) =
                        __floats2bfloat162_rn(acc[i][j][2 * h] * scale, acc[i][j][2 * h + 1] * scale);
            }
        }
}
