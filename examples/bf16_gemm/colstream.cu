// bf16_gemm_colstream: C = A @ B for very few rows (a decode step, M up to about 16),
// bf16 in and out, fp32 FFMA on the CUDA cores (no tensor cores), one rounding to bf16.
//
// Launch rule (a program of two steps, with a workspace `partial` of SPLITK * M * N
// floats):
//   1. bf16_gemm_colstream_partial
//        grid  = (ceil_div(N, 256), SPLITK, ceil_div(M, MT)), block = (WARPS * 32, 1, 1)
//        args  A, B, partial, M, N, K, i32:ceil_div(ceil_div(K, SPLITK), 8) * 8
//   2. bf16_gemm_colstream_reduce, grid-stride over the M * N outputs:
//        C[i] = bf16(partial[0][i] + partial[1][i] + ...)
//        args  partial, C, i64:M * N, i32:SPLITK
//
// Why: at M = 16 a decode step streams B (K x N) once and does 32 multiply-adds per
// 2-byte element of it. The tensor-core kernels feed B through shared memory into
// fragments (ldmatrix.trans: B is row-major) and multiply tiles of 64 or 128 rows, most
// of them zero; they reach about half of the DRAM floor there. Here B goes straight from
// global memory into registers, 16 bytes (8 columns) a lane, converted once to fp32 and
// multiplied with each of the MT rows of A: 8 MT FFMAs a 16-byte load, A read from shared
// memory as broadcasts. At MT = 16 the FFMAs (about 2 GFLOP at 16 x 8192 x 8192) take
// about as long as streaming B, so this is a kernel for M up to about 16.
//
// Decomposition: a block owns 256 columns (32 lanes x 8) and MT rows, and one of SPLITK
// K slices of KS rows (the last argument; a multiple of 8). Its warps split the slice
// among them, row k to warp (k / U) % WARPS in groups of U rows, each lane loading the U
// rows' 16-byte chunks before it multiplies any (U loads in flight a lane). A is staged
// per chunk of KC rows as fp32, transposed (As[k][m]), so a lane reads A's column k as
// MT / 4 float4 broadcasts. After the slice the warps' sums meet in shared memory in
// warp order (deterministic), and the block stores its MT x 256 tile of the slice's
// partial sums; the reduce adds the slices in order and rounds once.
//
// Bounds: N and K are multiples of 8 (the workload's rule), so a lane's 16-byte chunk is
// wholly in or out of N and a K slice is whole chunks; rows of A past M are zero in As
// and not stored; k past K is skipped.
//
// Knobs: MT rows a block (8 MT accumulators a thread), WARPS, SPLITK (K slices: blocks
// enough to fill the GPU at N / 256 column tiles), U rows of B in flight a lane.

#include <cuda_bf16.h>

// knob MT: 16 8 4
#ifndef MT
#define MT 16
#endif

// knob WARPS: 8 4 16
#ifndef WARPS
#define WARPS 8
#endif

// knob SPLITK: 4 2 8 1 16
#ifndef SPLITK
#define SPLITK 4
#endif

// knob U: 4 2 8
#ifndef U
#define U 4
#endif

#define THREADS (WARPS * 32)
#define KC (WARPS * U * 4)  // A rows staged at a time: four groups of U rows a warp

static_assert(MT % 4 == 0, "MT must be a multiple of 4 (A is read as float4)");
static_assert(MT * 8 <= 128, "more than 128 accumulators a thread spill");
static_assert(KC * MT * 4 + MT * 256 * 4 <= 48 * 1024, "the staged A and the reduction tile exceed 48 KiB");
// Registers a thread: the accumulators, U chunks of B in flight and about 40 more, within
// what a block of THREADS leaves each thread (fitted to ptxas 13 for sm_90: of the 135 knob
// points that compile without it, it refuses the 15 that spilled and 5 more; none it
// allows spills).
static_assert(MT * 8 + 4 * U + 40 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "the registers this needs a thread exceed what a block of WARPS warps leaves it");

// Eight bf16 (a 16-byte chunk) as fp32: a bf16 is the top half of its fp32.
__device__ __forceinline__ void colstream_widen(const uint4& w, float (&b)[8]) {
  const unsigned v[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    b[2 * i] = __uint_as_float(v[i] << 16);
    b[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS)
bf16_gemm_colstream_partial(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                            float* __restrict__ partial, int M, int N, int K, int KS) {
  __shared__ __align__(16) float As[KC][MT];
  __shared__ __align__(16) float red[MT][256];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * 256 + 8 * lane;  // this lane's 8 columns
  const int m0 = blockIdx.z * MT;
  const int k_begin = blockIdx.y * KS, k_end = min(K, k_begin + KS);
  const bool mine = col < N;

  float acc[MT][8];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[m][j] = 0.0f;

  for (int k0 = k_begin; k0 < k_end; k0 += KC) {
    __syncthreads();  // the last chunk's readers are done with As
    for (int i = threadIdx.x; i < KC * MT; i += THREADS) {
      const int k = i / MT, m = i % MT;
      const int gk = k0 + k, gm = m0 + m;
      As[k][m] = gk < k_end && gm < M ? __bfloat162float(A[(long long)gm * K + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 1
    for (int g = warp * U; g < KC; g += WARPS * U) {  // this warp's groups of U rows in the chunk
      uint4 w[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int k = k0 + g + u;
        w[u] = mine && k < k_end ? *reinterpret_cast<const uint4*>(B + (long long)k * N + col)
                                 : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float b[8];
        colstream_widen(w[u], b);
#pragma unroll
        for (int m4 = 0; m4 < MT; m4 += 4) {
          const float4 a = *reinterpret_cast<const float4*>(&As[g + u][m4]);
          const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
          for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[m4 + q][j] = fmaf(av[q], b[j], acc[m4 + q][j]);
        }
      }
    }
  }

  // The warps' sums, added in warp order into the block's tile, then stored.
#pragma unroll 1
  for (int turn = 0; turn < WARPS; ++turn) {
    if (warp == turn)
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < 8; ++j) red[m][8 * lane + j] = turn ? red[m][8 * lane + j] + acc[m][j] : acc[m][j];
    __syncthreads();
  }
  float* out = partial + (long long)blockIdx.y * M * N;
  for (int i = threadIdx.x; i < MT * 256; i += THREADS) {
    const int m = i / 256, c = i % 256;
    const int gm = m0 + m, gc = blockIdx.x * 256 + c;
    if (gm < M && gc < N) out[(long long)gm * N + gc] = red[m][c];
  }
}

// C[i] = bf16(partial[0][i] + partial[1][i] + ...), the slices in order, rounded once.
extern "C" __global__ void bf16_gemm_colstream_reduce(const float* __restrict__ partial,
                                                      __nv_bfloat16* __restrict__ C, long long mn, int splits) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn;
       i += (long long)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += partial[z * mn + i];
    C[i] = __float2bfloat16_rn(s);
  }
}
