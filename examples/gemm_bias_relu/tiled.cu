// gemm_bias_relu_tiled: 2D register-tiled fp32 GEMM with a fused bias + ReLU
// epilogue (plain FFMA, no tensor cores / TF32).
//   C[M,N] = relu(A[M,K] @ B[K,N] + bias[N]), all row-major. Correct for
//   arbitrary M, N, K. The main loop is examples/sgemm/tiled.cu unchanged; the
//   bias and the ReLU are applied to the accumulators in the store, so C is
//   written once and never re-read (an unfused bias/ReLU pass would move C
//   through DRAM twice more).
//
// Each block computes a BM x BN tile of C, stepping through K in chunks of BK.
// A BM x BK slice of A (stored transposed as As[BK][BM]) and a BK x BN slice
// of B (Bs[BK][BN]) are staged in static shared memory; each thread then
// accumulates a TM x TN micro-tile of C in registers.
//
// Launch rule:
//   block  = ((BM/TM) * (BN/TN), 1, 1)
//   grid   = (ceil_div(N, BN), ceil_div(M, BM), 1)
//   shared = 0   (static shared memory only: (BM*BK + BK*BN) floats)
//
// Global loads are bounds-checked (zero fill outside the matrix); stores are
// bounds-checked, and bias is read only for columns < N. float4 loads are used
// only when legal for the whole launch: A rows via float4 when K % 4 == 0 and A
// is 16-byte aligned, B rows via float4 when N % 4 == 0 and B is 16-byte
// aligned. Since BK and BN are multiples of 4, a float4 is then either
// entirely inside or entirely outside the matrix.

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

#define GBR_TILED_THREADS ((BM / TM) * (BN / TN))

static_assert(BM % TM == 0, "BM must be a multiple of TM");
static_assert(BN % TN == 0, "BN must be a multiple of TN");
static_assert(BK % 4 == 0, "BK must be a multiple of 4 (float4 A loads)");
static_assert(BN % 4 == 0, "BN must be a multiple of 4 (float4 B loads)");
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM, TN must be multiples of 4");
static_assert(GBR_TILED_THREADS >= 16 && GBR_TILED_THREADS <= 1024,
              "threads per block (BM/TM)*(BN/TN) must be in [16, 1024]");
static_assert((BM * BK + BK * BN) * sizeof(float) <= 48 * 1024,
              "static shared memory must stay within 48 KiB");

// minBlocks = 1: cap registers only by the block size (65536 / threads), so
// ptxas does not squeeze registers (and spill) chasing extra occupancy.
extern "C" __global__ void __launch_bounds__(GBR_TILED_THREADS, 1)
gemm_bias_relu_tiled(const float* __restrict__ A,
                     const float* __restrict__ B,
                     const float* __restrict__ bias,
                     float* __restrict__ C,
                     int M, int N, int K)
{
    constexpr int NT = GBR_TILED_THREADS;
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

    for (int k0 = 0; k0 < K; k0 += BK) {
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
                if (gr < M && gc < K)
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
                As[c][r] = (gr < M && gc < K) ? A[(size_t)gr * K + gc] : 0.0f;
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
                if (gr < K && gc < N)
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
                Bs[r][c] = (gr < K && gc < N) ? B[(size_t)gr * N + gc] : 0.0f;
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

    // ---- bias + ReLU epilogue, bounds-checked store ----
    // The thread's TN bias values are loaded once, not once per row; columns
    // past N get 0 and are never stored.
    float bv[TN];
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int gc = bn0 + tx * TN + j;
        bv[j] = gc < N ? bias[gc] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gr = bm0 + ty * TM + i;
        if (gr < M) {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int gc = bn0 + tx * TN + j;
                if (gc < N)
                    C[(size_t)gr * N + gc] = fmaxf(acc[i][j] + bv[j], 0.0f);
            }
        }
    }
}
