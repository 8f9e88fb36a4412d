// gemm_bias_relu_colstream: C = relu(A @ B + bias) for very few rows (a decode step, M up
// to about 16), fp32 FFMA on the CUDA cores (no tensor cores, no TF32), all row-major and
// densely packed.
// Correct for arbitrary positive M, N, K.
//
// Launch rule (a program of two steps, with a workspace `partial` of SPLITK * M * N
// floats):
//   1. gemm_bias_relu_colstream_partial
//        grid  = (ceil_div(N, 128), SPLITK, ceil_div(M, MT)), block = (WARPS * 32, 1, 1)
//        args  A, B, partial, M, N, K, i32:ceil_div(K, SPLITK)
//   2. gemm_bias_relu_colstream_reduce, grid-stride over the M * N outputs:
//        C[i] = max(0, partial[0][i] + partial[1][i] + ... + bias[i % N])
//        args  partial, bias, C, i64:M * N, N, i32:SPLITK
//
// Why: at M = 16 a GEMM streams B (K x N) once and does 32 multiply-adds per 4-byte
// element of it; tiled kernels multiply tiles of 64 or 128 rows, most of them zero, and
// leave B's stream to few blocks. Here B goes straight from global memory into
// registers, 16 bytes (4 columns) a lane, each value multiplied with each of the MT rows
// of A, which the block stages in shared memory and reads as broadcasts: 4 MT FFMAs a
// 16-byte load. sgemm's colstream.cu is the same kernel without the epilogue.
//
// Decomposition: a block owns 128 columns (32 lanes x 4) and MT rows, and one of SPLITK
// K slices of KS rows (the last argument). Its warps split the slice among them, row k
// to warp (k / U) % WARPS in groups of U rows, each lane loading the U rows' chunks before
// it multiplies any (U loads in flight a lane). A is staged per chunk of KC rows
// transposed (As[k][m]), so a lane reads A's column k as MT / 4 float4 broadcasts. After
// the slice the warps' sums meet in shared memory in warp order (deterministic), and the
// block stores its MT x 128 tile of the slice's partial sums; the second step adds the
// slices in order.
//
// Bounds: N not a multiple of 4 (rows of B not 16-byte aligned) loads B one float at a
// time; columns past N load zeros and are not stored; rows of A past M are zero in As
// and not stored; k past K is skipped.
//
// Knobs: MT rows a block (4 MT accumulators a thread), WARPS, SPLITK (K slices: blocks
// enough to fill the GPU at N / 128 column tiles), U rows of B in flight a lane.

// knob MT: 16 8 4
#ifndef MT
#define MT 16
#endif

// knob WARPS: 8 4 16
#ifndef WARPS
#define WARPS 8
#endif

// SPLITK = 8: on an H100 at 16 x 4096 x 4096, 0.0571 ms against 0.0726 at 4 (sgemm; 0.0568
// against 0.0721 for gemm_bias_relu), both past the libraries (about 0.094 ms)
// knob SPLITK: 8 4 2 1 16
#ifndef SPLITK
#define SPLITK 8
#endif

// knob U: 4 2 8
#ifndef U
#define U 4
#endif

#define THREADS (WARPS * 32)
#define KC (WARPS * U * 4)  // A rows staged at a time: four groups of U rows a warp

static_assert(MT % 4 == 0, "MT must be a multiple of 4 (A is read as float4)");
static_assert(KC * MT * 4 + MT * 128 * 4 <= 48 * 1024, "the staged A and the reduction tile exceed 48 KiB");
// Registers a thread: the accumulators, U chunks of B in flight and about 40 more, within
// what a block of THREADS leaves each thread.
static_assert(MT * 4 + 4 * U + 40 <= (65536 / THREADS < 255 ? 65536 / THREADS : 255),
              "the registers this needs a thread exceed what a block of WARPS warps leaves it");

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_bias_relu_colstream_partial(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ partial,
                         int M, int N, int K, int KS) {
  __shared__ __align__(16) float As[KC][MT];
  __shared__ __align__(16) float red[MT][128];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * 128 + 4 * lane;  // this lane's 4 columns
  const int m0 = blockIdx.z * MT;
  const int k_begin = blockIdx.y * KS, k_end = min(K, k_begin + KS);
  const bool vec = (N & 3) == 0;

  float acc[MT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[m][j] = 0.0f;

  for (int k0 = k_begin; k0 < k_end; k0 += KC) {
    __syncthreads();  // the last chunk's readers are done with As
    for (int i = threadIdx.x; i < KC * MT; i += THREADS) {
      const int k = i / MT, m = i % MT;
      const int gk = k0 + k, gm = m0 + m;
      As[k][m] = gk < k_end && gm < M ? A[(long long)gm * K + gk] : 0.0f;
    }
    __syncthreads();
#pragma unroll 1
    for (int g = warp * U; g < KC; g += WARPS * U) {  // this warp's groups of U rows in the chunk
      float4 b[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int k = k0 + g + u;
        b[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (k < k_end && col < N) {
          const float* p = B + (long long)k * N + col;
          if (vec) {
            b[u] = *reinterpret_cast<const float4*>(p);  // N and col multiples of 4: col + 3 < N
          } else {
            b[u].x = p[0];
            if (col + 1 < N) b[u].y = p[1];
            if (col + 2 < N) b[u].z = p[2];
            if (col + 3 < N) b[u].w = p[3];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float bv[4] = {b[u].x, b[u].y, b[u].z, b[u].w};
#pragma unroll
        for (int m4 = 0; m4 < MT; m4 += 4) {
          const float4 a = *reinterpret_cast<const float4*>(&As[g + u][m4]);
          const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
          for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[m4 + q][j] = fmaf(av[q], bv[j], acc[m4 + q][j]);
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
        for (int j = 0; j < 4; ++j) red[m][4 * lane + j] = turn ? red[m][4 * lane + j] + acc[m][j] : acc[m][j];
    __syncthreads();
  }
  float* out = partial + (long long)blockIdx.y * M * N;
  for (int i = threadIdx.x; i < MT * 128; i += THREADS) {
    const int m = i / 128, c = i % 128;
    const int gm = m0 + m, gc = blockIdx.x * 128 + c;
    if (gm < M && gc < N) out[(long long)gm * N + gc] = red[m][c];
  }
}

// C[i] = max(0, partial[0][i] + partial[1][i] + ... + bias[i % N]), the slices in order.
extern "C" __global__ void gemm_bias_relu_colstream_reduce(const float* __restrict__ partial,
                                                           const float* __restrict__ bias, float* __restrict__ C,
                                                           long long mn, int n, int splits) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn;
       i += (long long)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += partial[z * mn + i];
    C[i] = fmaxf(s + bias[i % n], 0.0f);
  }
}
