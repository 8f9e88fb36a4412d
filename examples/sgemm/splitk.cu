// sgemm_splitk: split-K fp32 SGEMM as a program of two launches (plain FFMA, no
// tensor cores / TF32). C[M,N] = A[M,K] @ B[K,N], all row-major, any M, N, K.
//
// When M x N is small and K long (256 x 256 x 131072), one block per C tile leaves
// most SMs idle. Split-K gives every tile SPLITK blocks, one per slice of K:
//
//   1. sgemm_splitk_partial, grid (ceil_div(N, BN), ceil_div(M, BM), SPLITK):
//      block z computes A[:, slice z] @ B[slice z, :] for its tile (the register-
//      tiled body of tiled.cu) into partial[z] (workspace, SPLITK x M x N floats);
//      a slice is KCHUNK = ceil_div(ceil_div(K, SPLITK), BK) * BK long, so float4
//      loads never straddle two slices. A block whose slice starts past K writes
//      zeros (the workspace starts poisoned: every element must be written).
//   2. sgemm_splitk_reduce, grid-stride: C[i] = sum over z of partial[z][i], in
//      order z = 0, 1, ... (deterministic).
//
// SPLITK = 1 is plain tiled GEMM plus a copy; the tuner picks per shape.

// knob SPLITK: 1 2 4 8 16 32 64
#ifndef SPLITK
#define SPLITK 16
#endif

// knob BM: 32 64 128
#ifndef BM
#define BM 64
#endif

// knob BN: 32 64 128
#ifndef BN
#define BN 64
#endif

// knob BK: 8 16 32
#ifndef BK
#define BK 8
#endif

// knob TM: 4 8
#ifndef TM
#define TM 8
#endif

// knob TN: 4 8
#ifndef TN
#define TN 8
#endif

#define SGEMM_TILED_THREADS ((BM / TM) * (BN / TN))

static_assert(BM % TM == 0, "BM must be a multiple of TM");
static_assert(BN % TN == 0, "BN must be a multiple of TN");
static_assert(BK % 4 == 0, "BK must be a multiple of 4 (float4 A loads)");
static_assert(BN % 4 == 0, "BN must be a multiple of 4 (float4 B loads)");
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM, TN must be multiples of 4");
static_assert(SGEMM_TILED_THREADS >= 16 && SGEMM_TILED_THREADS <= 1024,
              "threads per block (BM/TM)*(BN/TN) must be in [16, 1024]");
static_assert((BM * BK + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory must stay within 48 KiB");

// minBlocks = 1: cap registers only by the block size (65536 / threads), so
// ptxas does not squeeze registers (and spill) chasing extra occupancy.
extern "C" __global__ void __launch_bounds__(SGEMM_TILED_THREADS, 1)
sgemm_splitk_partial(const float* __restrict__ A,
                     const float* __restrict__ B,
                     float* __restrict__ partial,
                     int M, int N, int K, int kchunk)
{
    // This block's slice of K; C is this slice's plane of the workspace.
    const long long k_begin = (long long)blockIdx.z * kchunk;
    const int k_end = (int)(k_begin + kchunk < K ? k_begin + kchunk : K);
    float* __restrict__ C = partial + (size_t)blockIdx.z * M * N;
    constexpr int NT = SGEMM_TILED_THREADS;
    // Strided cooperative loads: thread tid handles elements tid, tid+NT, ...
    // Trip counts are rounded up; the tail is guarded when NT does not divide
    // the element count. Loops with <= 4 trips are fully unrolled (loads in
    // flight together); longer ones (few threads, big tiles) stay rolled so
    // they do not blow up register pressure and spill.
    constexpr int LOADS_A4 = (BM * (BK / 4) + NT - 1) / NT;  // float4 A loads
    constexpr int LOADS_A1 = (BM * BK + NT - 1) / NT;        // scalar A loads
    constexpr int LOADS_B4 = (BK * (BN / 4) + NT - 1) / NT;  // float4 B loads
    constexpr int LOADS_B1 = (BK * BN + NT - 1) / NT;        // scalar B loads

    __shared__ __align__(16) float As[BK][BM];  // A tile, transposed
    __shared__ __align__(16) float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int bm0 = blockIdx.y * BM;           // first C row of this block
    const int bn0 = blockIdx.x * BN;           // first C col of this block

    // Micro-tile owned by this thread: rows ty*TM.., cols tx*TN..
    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);

    // Vector loads are legal only if every float4 is 16-byte aligned: uniform
    // per launch, so no divergence.
    const bool vecA = ((K & 3) == 0) &&
                      ((reinterpret_cast<unsigned long long>(A) & 15ull) == 0);
    const bool vecB = ((N & 3) == 0) &&
                      ((reinterpret_cast<unsigned long long>(B) & 15ull) == 0);

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;

    for (int k0 = (int)(k_begin < K ? k_begin : K); k0 < k_end; k0 += BK) {
        // ---- stage A[bm0:bm0+BM, k0:k0+BK] into As (transposed) ----
        if (vecA) {
            // BM rows x (BK/4) float4 per row; consecutive threads walk along k.
#pragma unroll (LOADS_A4 <= 4 ? LOADS_A4 : 1)
            for (int it = 0; it < LOADS_A4; ++it) {
                const int i = tid + it * NT;
                if ((BM * (BK / 4)) % NT != 0 && i >= BM * (BK / 4)) break;
                const int r  = i / (BK / 4);
                const int c  = (i % (BK / 4)) * 4;
                const int gr = bm0 + r;
                const int gc = k0 + c;                 // multiple of 4, K % 4 == 0
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (gr < M && gc < k_end)
                    v = *reinterpret_cast<const float4*>(A + (size_t)gr * K + gc);
                As[c + 0][r] = v.x;
                As[c + 1][r] = v.y;
                As[c + 2][r] = v.z;
                As[c + 3][r] = v.w;
            }
        } else {
#pragma unroll (LOADS_A1 <= 4 ? LOADS_A1 : 1)
            for (int it = 0; it < LOADS_A1; ++it) {
                const int i = tid + it * NT;
                if ((BM * BK) % NT != 0 && i >= BM * BK) break;
                const int r  = i / BK;
                const int c  = i % BK;
                const int gr = bm0 + r;
                const int gc = k0 + c;
                As[c][r] = (gr < M && gc < k_end) ? A[(size_t)gr * K + gc] : 0.0f;
            }
        }

        // ---- stage B[k0:k0+BK, bn0:bn0+BN] into Bs ----
        if (vecB) {
#pragma unroll (LOADS_B4 <= 4 ? LOADS_B4 : 1)
            for (int it = 0; it < LOADS_B4; ++it) {
                const int i = tid + it * NT;
                if ((BK * (BN / 4)) % NT != 0 && i >= BK * (BN / 4)) break;
                const int r  = i / (BN / 4);
                const int c  = (i % (BN / 4)) * 4;
                const int gr = k0 + r;
                const int gc = bn0 + c;                // multiple of 4, N % 4 == 0
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (gr < k_end && gc < N)
                    v = *reinterpret_cast<const float4*>(B + (size_t)gr * N + gc);
                *reinterpret_cast<float4*>(&Bs[r][c]) = v;
            }
        } else {
#pragma unroll (LOADS_B1 <= 4 ? LOADS_B1 : 1)
            for (int it = 0; it < LOADS_B1; ++it) {
                const int i = tid + it * NT;
                if ((BK * BN) % NT != 0 && i >= BK * BN) break;
                const int r  = i / BN;
                const int c  = i % BN;
                const int gr = k0 + r;
                const int gc = bn0 + c;
                Bs[r][c] = (gr < k_end && gc < N) ? B[(size_t)gr * N + gc] : 0.0f;
            }
        }

        __syncthreads();

        // ---- register-tiled outer products over the BK slice ----
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM];
            float b[TN];
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[kk][ty * TM + i]);
                a[i + 0] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[kk][tx * TN + j]);
                b[j + 0] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }

        __syncthreads();
    }

    // ---- bounds-checked store ----
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gr = bm0 + ty * TM + i;
        if (gr < M) {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int gc = bn0 + tx * TN + j;
                if (gc < N)
                    C[(size_t)gr * N + gc] = acc[i][j];
            }
        }
    }
}

// C[i] = partial[0][i] + partial[1][i] + ...: one thread per element, grid-stride.
extern "C" __global__ void sgemm_splitk_reduce(const float* __restrict__ partial,
                                               float* __restrict__ C,
                                               long long mn, int splits)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn;
         i += (long long)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int z = 0; z < splits; ++z)
            s += partial[z * mn + i];
        C[i] = s;
    }
}
