// sgemm_rowdot: C[M,N] = A[M,K] @ B[K,N] for few columns (a tall-skinny product, N up
// to a few dozen), fp32 FFMA (no tensor cores, no TF32), all row-major and densely
// packed. Correct for arbitrary positive M, N, K.
//
// Launch rule:
//   grid   = (ceil_div(M, R * WARPS), ceil_div(N, BN), 1)
//   block  = (WARPS * 32, 1, 1)
//   shared = 0   (static: BN * (KC + 4) floats, at most 48 KiB)
//
// Why: at N = 32 the work is streaming A (M x K) once; B (K x N) is small and stays in
// L2. The tiled kernels cut N into tiles of 64 to 256 columns, so most of their work
// multiplies zero columns, and their M tiles leave A's rows to a few warps. Here every
// warp owns R rows of A and all BN columns: its lanes walk the rows along K in float4
// steps (each row read once, coalesced: 512 bytes a warp a step), each lane keeping
// R x BN partial sums, and the lanes' sums meet at the end in one exchange.
//
// Decomposition: a block is WARPS warps, R * WARPS rows and BN columns of C. K goes in
// chunks of KC: the block stages B's chunk transposed in shared memory (bt[n][k], rows
// padded by 4 floats so float4 reads stay aligned), then lane l multiplies the float4 of
// A at k = 4 l + 128 j (j < KC / 128) of each of its R rows with bt[n][k .. k + 3] for
// every n: one shared float4 for 4 R FFMAs. The staging writes go 8 columns by 4 k a
// warp, which the padding spreads over 32 banks; the float4 reads of a warp are 512
// contiguous bytes.
//
// The exchange: after the last chunk each lane holds R x BN partial sums of a row's
// dot products over its share of K. Five xor-shuffle steps halve the values a lane
// keeps (the lanes with the step's bit set keep the upper half and send the lower):
// BN - 1 shuffles a row instead of 5 BN, after which lane l holds max(1, BN / 32)
// finished sums, of columns fixed by its bits (below BN = 32, neighbouring lanes hold
// the same one and the even lane stores it).
//
// Bounds: rows past M load zeros and store nothing; columns past N are zero in bt and
// are not stored; K not a multiple of 4 loads A one float at a time (its rows are then
// not 16-byte aligned), and bt is zero past K.
//
// Accuracy: fp32 FFMA, each lane summing its k in order, the lanes' sums added in a
// tree: no worse than a sequential fp32 sum over K.
//
// Knobs: R rows a warp (R x BN accumulators a thread: 128 at the default), WARPS warps
// a block, BN columns a block (a power of two from 16), KC the K chunk (a multiple of
// 128; BN * (KC + 4) * 4 bytes must fit the 48 KiB of static shared memory).

// knob R: 4 2 1 8
#ifndef R
#define R 4
#endif

// knob WARPS: 8 4 16
#ifndef WARPS
#define WARPS 8
#endif

// knob BN: 32 16 64
#ifndef BN
#define BN 32
#endif

// knob KC: 256 128 512
#ifndef KC
#define KC 256
#endif

static_assert(BN == 16 || BN == 32 || BN == 64, "BN must be 16, 32 or 64");
static_assert(KC % 128 == 0, "KC must be a multiple of 128 (a warp's float4 step)");
static_assert(BN * (KC + 4) * 4 <= 48 * 1024, "BN * (KC + 4) floats exceed 48 KiB of static shared memory");
static_assert(R * BN <= 128, "more than 128 accumulators a thread spill");
// Registers a thread: the accumulators, the staged float4s of A and about 56 more, within
// what a block of THREADS leaves each thread (fitted to ptxas 13 for sm_90 over the knob
// points tests/test_example_kernels.py compiles: none of those it allows spills).
static_assert(R * BN + 4 * R * (KC / 128) + 56 <= (65536 / (WARPS * 32) < 255 ? 65536 / (WARPS * 32) : 255),
              "the registers this needs a thread exceed what a block of WARPS warps leaves it");

#define THREADS (WARPS * 32)

// One step of the exchange over lane bit `o`, each lane holding COUNT sums a row (a
// template, so that every index is known to the compiler and the sums stay in registers).
template <int COUNT>
__device__ __forceinline__ void rowdot_halve(float (&acc)[R][BN], int lane, int o, int& col) {
  const bool upper = (lane & o) != 0;
  if constexpr (COUNT > 1) {
#pragma unroll
    for (int i = 0; i < COUNT / 2; ++i)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float send = upper ? acc[r][i] : acc[r][i + COUNT / 2];
        const float keep = upper ? acc[r][i + COUNT / 2] : acc[r][i];
        acc[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
      }
    if (upper) col += COUNT / 2;
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][0] += __shfl_xor_sync(0xffffffffu, acc[r][0], o);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_rowdot(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K) {
  __shared__ __align__(16) float bt[BN][KC + 4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.y * BN;
  const long long row0 = ((long long)blockIdx.x * WARPS + warp) * R;
  const bool vec = (K & 3) == 0;

  float acc[R][BN];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int n = 0; n < BN; ++n) acc[r][n] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += KC) {
    __syncthreads();  // the last chunk's readers are done with bt
    // B[k0 .. k0 + KC)[n0 .. n0 + BN) into bt[n][k]: a warp takes 8 columns x 4 k.
    for (int i = threadIdx.x; i < KC * BN; i += THREADS) {
      const int t = i & 31, g = i >> 5;
      const int k = (g % (KC / 4)) * 4 + (t & 3), n = (g / (KC / 4)) * 8 + (t >> 2);
      const int gk = k0 + k, gn = n0 + n;
      bt[n][k] = gk < K && gn < N ? B[(long long)gk * N + gn] : 0.0f;
    }
    __syncthreads();

    float4 a[KC / 128][R];
#pragma unroll
    for (int j = 0; j < KC / 128; ++j) {
      const int k = k0 + 4 * lane + 128 * j;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const long long row = row0 + r;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < M && k < K) {
          const float* p = A + row * K + k;
          if (vec) {
            v = *reinterpret_cast<const float4*>(p);  // k < K and both multiples of 4: k + 3 < K
          } else {
            v.x = p[0];
            if (k + 1 < K) v.y = p[1];
            if (k + 2 < K) v.z = p[2];
            if (k + 3 < K) v.w = p[3];
          }
        }
        a[j][r] = v;
      }
    }
#pragma unroll
    for (int j = 0; j < KC / 128; ++j) {
      const int kk = 4 * lane + 128 * j;
#pragma unroll
      for (int n = 0; n < BN; ++n) {
        const float4 b = *reinterpret_cast<const float4*>(&bt[n][kk]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float s = acc[r][n];
          s = fmaf(a[j][r].x, b.x, s);
          s = fmaf(a[j][r].y, b.y, s);
          s = fmaf(a[j][r].z, b.z, s);
          s = fmaf(a[j][r].w, b.w, s);
          acc[r][n] = s;
        }
      }
    }
  }

  // The exchange (the header): every lane takes part, rows past M included.
  int col = 0;
  rowdot_halve<BN>(acc, lane, 16, col);
  rowdot_halve<BN / 2>(acc, lane, 8, col);
  rowdot_halve<BN / 4>(acc, lane, 4, col);
  rowdot_halve<BN / 8>(acc, lane, 2, col);
  rowdot_halve<BN / 16>(acc, lane, 1, col);
  if (BN < 32 && (lane & (32 / BN - 1)) != 0) return;  // a neighbour holds the same sums
  constexpr int KEPT = BN >= 32 ? BN / 32 : 1;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long row = row0 + r;
    if (row >= M) break;
#pragma unroll
    for (int i = 0; i < KEPT; ++i) {
      const int n = n0 + col + i;
      if (n < N) C[row * N + n] = acc[r][i];
    }
  }
}
