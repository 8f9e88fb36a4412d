// Tensor cores through mma.sync.m16n8k16 (bf16 in, fp32 accumulate): each block
// computes a BM x BN tile of C, each warp a WM x WN piece of it as (WM/16) x (WN/8)
// MMA tiles. K advances BK at a time through a STAGES-deep ring of shared-memory
// tiles filled by cp.async (16-byte chunks; chunks past M, N or K are zero-filled,
// which is why N and K must be multiples of 8). Fragments come from shared memory
// with ldmatrix (B transposed on the way); rows are padded by 8 elements so the
// eight row addresses of an ldmatrix fall in different banks.
#include <cuda_bf16.h>

// knob BM: 64 128 256
#ifndef BM
#define BM 128
#endif
// knob BN: 64 128 256
#ifndef BN
#define BN 128
#endif
// knob BK: 32 64
#ifndef BK
#define BK 32
#endif
// knob WM: 32 64
#ifndef WM
#define WM 64
#endif
// knob WN: 32 64
#ifndef WN
#define WN 32
#endif
// knob STAGES: 2 3 4
#ifndef STAGES
#define STAGES 3
#endif

#define THREADS ((BM / WM) * (BN / WN) * 32)
#define PAD 8
#define AS (BK + PAD)  // A tile row stride, elements
#define BS (BN + PAD)  // B tile row stride, elements
#define MI (WM / 16)
#define NI (WN / 8)

static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "MMA shapes: WM, WN, BK multiples of 16");
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

__device__ __forceinline__ void load_stage(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                           __nv_bfloat16* as, __nv_bfloat16* bs, int M, int N, int K,
                                           int bm, int bn, int k0)
{
    for (int c = threadIdx.x; c < BM * BK / 8; c += THREADS) {
        const int r = c / (BK / 8), k = (c % (BK / 8)) * 8;
        const bool ok = bm + r < M && k0 + k < K;
        const __nv_bfloat16* src = ok ? A + (long long)(bm + r) * K + k0 + k : A;
        cp_async16(as + r * AS + k, src, ok ? 16 : 0);
    }
    for (int c = threadIdx.x; c < BK * BN / 8; c += THREADS) {
        const int r = c / (BN / 8), n = (c % (BN / 8)) * 8;
        const bool ok = k0 + r < K && bn + n < N;
        const __nv_bfloat16* src = ok ? B + (long long)(k0 + r) * N + bn + n : B;
        cp_async16(bs + r * BS + n, src, ok ? 16 : 0);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
bf16_gemm_mma(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
              __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* a_tiles = reinterpret_cast<__nv_bfloat16*>(smem);
    __nv_bfloat16* b_tiles = a_tiles + STAGES * BM * AS;

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
        if (s < tiles)
            load_stage(A, B, a_tiles + s * BM * AS, b_tiles + s * BK * BS, M, N, K, bm, bn, s * BK);
        asm volatile("cp.async.commit_group;\n");
    }

    for (int t = 0; t < tiles; ++t) {
        // Tile t has landed (at most STAGES-2 younger groups pending); every warp is
        // also done with tile t-1, whose stage the next load overwrites.
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();
        const int next = t + STAGES - 1;
        if (next < tiles)
            load_stage(A, B, a_tiles + (next % STAGES) * BM * AS, b_tiles + (next % STAGES) * BK * BS, M, N, K,
                       bm, bn, next * BK);
        asm volatile("cp.async.commit_group;\n");

        const __nv_bfloat16* as = a_tiles + (t % STAGES) * BM * AS;
        const __nv_bfloat16* bs = b_tiles + (t % STAGES) * BK * BS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                // Lanes 0-15 address rows 0-15 at column kk, lanes 16-31 the same rows at kk + 8.
                const __nv_bfloat16* p = as + (wm + i * 16 + (lane & 15)) * AS + kk + (lane >> 4) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3])
                             : "r"(smem_addr(p)));
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                // Rows kk..kk+15 of B for columns j*8 (lanes 0-15) and j*8 + 8 (lanes 16-31), transposed.
                const __nv_bfloat16* p = bs + (kk + (lane & 15)) * BS + wn + j * 8 + (lane >> 4) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(bf[j][0]), "=r"(bf[j][1]), "=r"(bf[j + 1][0]), "=r"(bf[j + 1][1])
                             : "r"(smem_addr(p)));
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]),
                          "r"(bf[j][1]));
        }
    }
    asm volatile("cp.async.wait_group 0;\n");

    // Accumulator layout: c0,c1 at (lane/4, 2*(lane%4) + {0,1}), c2,c3 eight rows below.
    const int group = lane / 4, pair = (lane % 4) * 2;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = bn + wn + j * 8 + pair;
            if (col >= N) continue;  // N is a multiple of 8: both columns of the pair are in or out
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = bm + wm + i * 16 + group + h * 8;
                if (row < M)
                    *reinterpret_cast<__nv_bfloat162*>(C + (long long)row * N + col) =
                        __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}
