// bf16_gemm_skinny: C = A @ B for few rows of A (a decode step, M <= 64), bf16 in and
// out, fp32 accumulation in mma.sync.m16n8k16. The work is streaming B (K x N) once at
// DRAM speed; A (M x K) is small and stays in L2.
//
// Launch rule (a program of one step, for its cluster):
//   grid    = (ceil_div(N, BN), SPLITK, ceil_div(M, 16 * MT)), cluster = (1, SPLITK, 1)
//   block   = (32 * WARPS, 1, 1)
//   shared  = max(STAGES * (16 * MT * (BK + 8) + BK * (BN + 8)) * 2, 16 * MT * BN * 4) bytes
//   args    A, B, C, M, N, K
//
// Why: the tiled kernels cut M into 128-row tiles (wgmma wants 64 rows a warpgroup), so
// at M = 16 seven eighths of their tensor-core work multiplies zero rows, and 8192
// columns give 64 tiles for 132 SMs. Here a block's rows are MT tiles of 16 (the mma's
// own M), its columns BN, and K is split over the SPLITK blocks of a cluster: at
// N = 8192, BN = 128 and SPLITK = 4 that is 256 blocks, each streaming a 2048 x 128 slab
// of B through a STAGES-deep cp.async ring. The cluster's partial sums meet in
// distributed shared memory: each block parks its fp32 tile in its own shared memory,
// and after one cluster barrier block r adds up and stores rows r, r + SPLITK, ... of
// the tile, reading the others' tiles directly (no workspace, no second launch).
//
// Decomposition: the block's BN columns are cut into WARPS strips of WN = BN / WARPS;
// a warp computes MT x (WN / 8) m16n8 tiles, fragments by ldmatrix (A) and
// ldmatrix.trans (B, row-major K x N). Shared rows are padded by 8 halves (16 bytes):
// the 8 row addresses of an ldmatrix fall in 8 distinct 16-byte bank groups.
//
// Bounds: a 16-byte chunk past M, N or the block's K range is zero-filled by cp.async
// (src-size 0): N and K are multiples of 8, so a chunk is wholly in or out. Stores are
// guarded per row; column pairs are whole (N even).
//
// Accuracy: fp32 accumulation in the tensor cores, the SPLITK partials added in fp32,
// one rounding to bf16 (round to nearest even).

#include <cuda_bf16.h>

// 16-row tiles of A per block: M up to 16 * MT in one row of blocks. Listed around the
// default, so 32 and 64 rows (MT 2 and 4) are each one tuner step away.
// knob MT: 2 1 4
#ifndef MT
#define MT 1
#endif

// knob BN: 64 128 256
#ifndef BN
#define BN 128
#endif

// knob BK: 32 64 128
#ifndef BK
#define BK 64
#endif

// knob WARPS: 4 8
#ifndef WARPS
#define WARPS 4
#endif

// knob STAGES: 3 4 6 8 12
#ifndef STAGES
#define STAGES 4
#endif

// blocks of a cluster sharing one tile's K (1: no cluster exchange)
// knob SPLITK: 1 2 4 8
#ifndef SPLITK
#define SPLITK 4
#endif

#define MROWS (16 * MT)
#define AS (BK + 8)  // A row stride, halves
#define BS (BN + 8)  // B row stride, halves
#define WN (BN / WARPS)
#define NT (WN / 8)
#define THREADS (32 * WARPS)
#define STAGE_H (MROWS * AS + BK * BS)  // halves per stage

#if (BN % WARPS) != 0 || (WN % 16) != 0
#error "BN / WARPS must be a multiple of 16 (pairs of n8 tiles per ldmatrix.x4.trans)"
#endif
#if (BK % 16) != 0
#error "BK must be a multiple of 16"
#endif
#if STAGES < 2
#error "a pipeline needs at least two stages"
#endif
#if SPLITK < 1 || SPLITK > 8
#error "SPLITK is a cluster size: 1 to 8"
#endif
#if STAGES * STAGE_H * 2 > 232448
#error "STAGES * (16 * MT * (BK + 8) + BK * (BN + 8)) * 2 bytes exceeds 227 KiB of shared memory"
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp16(unsigned dst, const void* src, bool in)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// One stage: A rows [m0, m0 + MROWS) and B rows [k0, k0 + BK) of columns [n0, n0 + BN),
// k limited to kend, as 16-byte chunks spread over the block's threads.
__device__ __forceinline__ void load_stage(__nv_bfloat16* st, const __nv_bfloat16* __restrict__ A,
                                           const __nv_bfloat16* __restrict__ B, int M, int N, int K, int m0, int n0,
                                           int k0, int kend)
{
    const unsigned sa = smem_addr(st), sb = smem_addr(st + MROWS * AS);
    for (int i = threadIdx.x; i < MROWS * (BK / 8); i += THREADS) {
        const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
        const bool in = m0 + r < M && k0 + c < kend;
        cp16(sa + 2u * (r * AS + c), in ? A + (size_t)(m0 + r) * K + k0 + c : A, in);
    }
    for (int i = threadIdx.x; i < BK * (BN / 8); i += THREADS) {
        const int r = i / (BN / 8), c = (i % (BN / 8)) * 8;
        const bool in = k0 + r < kend && n0 + c < N;
        cp16(sb + 2u * (r * BS + c), in ? B + (size_t)(k0 + r) * N + n0 + c : B, in);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
bf16_gemm_skinny(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                 __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) __nv_bfloat16 sm[];
    const int n0 = blockIdx.x * BN, m0 = blockIdx.z * MROWS;
    const int kper = ((K + SPLITK - 1) / SPLITK + BK - 1) / BK * BK;
    const int kbeg = min(K, (int)blockIdx.y * kper), kend = min(K, kbeg + kper);
    const int nk = (kend - kbeg + BK - 1) / BK;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wn0 = warp * WN;

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load_stage(sm + s * STAGE_H, A, B, M, N, K, m0, n0, kbeg + s * BK, kend);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    for (int kb = 0; kb < nk; ++kb) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2) : "memory");
        __syncthreads();  // stage kb landed for every thread; stage kb - 1 is free to refill
        const int pre = kb + STAGES - 1;
        if (pre < nk) load_stage(sm + (pre % STAGES) * STAGE_H, A, B, M, N, K, m0, n0, kbeg + pre * BK, kend);
        asm volatile("cp.async.commit_group;\n" ::: "memory");

        const __nv_bfloat16* As = sm + (kb % STAGES) * STAGE_H;
        const __nv_bfloat16* Bs = As + MROWS * AS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const unsigned p = smem_addr(As + (i * 16 + (lane & 15)) * AS + kk + (lane >> 4) * 8);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(p));
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned b[4];
                const unsigned p = smem_addr(Bs + (kk + (lane & 15)) * BS + wn0 + j * 8 + (lane >> 4) * 8);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(p));
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float* c = acc[i][j + h];
                        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                                     : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]),
                                       "r"(b[2 * h]), "r"(b[2 * h + 1]));
                    }
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");

    const int g = lane >> 2, t = lane & 3;
#if SPLITK == 1
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int col = n0 + wn0 + j * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + i * 16 + g + 8 * h;
                if (row < M && col < N)
                    *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + col) =
                        __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
#else
    // Park the partial tile (MROWS x BN fp32) in this block's shared memory, then block r
    // of the cluster adds up rows r, r + SPLITK, ... from every block's tile and stores them.
    __syncthreads();  // every warp is done reading the ring: the tile may overwrite it
    float* red = reinterpret_cast<float*>(sm);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<float2*>(red + (i * 16 + g + 8 * h) * BN + wn0 + j * 8 + 2 * t) =
                    make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    cluster_sync();
    unsigned rank;
    asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    const int rows = min(MROWS, M - m0);
    for (int row = rank; row < rows; row += SPLITK)
        for (int c = 2 * threadIdx.x; c < BN; c += 2 * THREADS) {
            if (n0 + c >= N) break;
            const unsigned local = smem_addr(red + row * BN + c);
            float sx = 0.0f, sy = 0.0f;
#pragma unroll
            for (int q = 0; q < SPLITK; ++q) {
                unsigned remote;
                float x, y;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(q));
                asm volatile("ld.shared::cluster.v2.f32 {%0,%1}, [%2];\n" : "=f"(x), "=f"(y) : "r"(remote) : "memory");
                sx += x;
                sy += y;
            }
            *reinterpret_cast<__nv_bfloat162*>(C + (size_t)(m0 + row) * N + n0 + c) = __floats2bfloat162_rn(sx, sy);
        }
    cluster_sync();  // no block leaves while another still reads its tile
#endif
}
