// gemm_bias_relu_tf32x3_padded: tf32x3.cu's 3xTF32 GEMM (C = relu(A @ B + bias)) for ragged sizes, as a program
// of three steps over two workspaces: A (M x K) and B (K x N) are copied into Ap (M x Kp)
// and Bp (Kp x Np), Kp and Np rounded up to multiples of 4 with zeros, then the GEMM runs
// on the copies with 16-byte cp.async, storing only C's N columns.
//
// Launch rule:
//   pad_rows  grid (min(ceil_div(rows * dcols / 4, 256), 2048)), block 256: Ap from A,
//             then Bp from B (args src, dst, rows, cols, drows, dcols)
//   GEMM      as tf32x3.cu (grid from N, shared from the knobs), args ... M, N, Np, Kp
//
// Why: a row of A or B that is not a multiple of 4 floats long puts every other row off
// 16-byte alignment, so tf32x3.cu falls back to a 4-byte cp.async per element (uniform
// per launch): 66% of the floor on an H200 at 8191 x 3001 x 6007 against 93% for an
// aligned shape. The copies read and write A and B once more (2% of that GEMM's time at
// the DRAM floor); the zeros add nothing to the sums, and columns past N are computed
// and dropped by the store's bounds. Shapes already aligned gain nothing: tf32x3 serves
// them without the copies.
//
// The body below is tf32x3.cu's, unchanged (a test keeps the copies identical).

// knob BM: 64 128 256
#ifndef BM
#define BM 128
#endif

// knob BN: 32 64 128 256
#ifndef BN
#define BN 128
#endif

// knob BK: 16 32
#ifndef BK
#define BK 32
#endif

// knob WM: 32 64
#ifndef WM
#define WM 64
#endif

// knob WN: 16 32 64
#ifndef WN
#define WN 32
#endif

// knob STAGES: 2 3 4
#ifndef STAGES
#define STAGES 4
#endif

// knob MINB: 1 2
#ifndef MINB
#define MINB 1
#endif

// knob GROUP: 1 8 16
#ifndef GROUP
#define GROUP 8
#endif

// knob FLUSH: 1 0
#ifndef FLUSH
#define FLUSH 1
#endif

// ---- tf32x3 body: the same text in examples/sgemm/tf32x3.cu, tf32x3_splitk.cu and
// examples/gemm_bias_relu/tf32x3.cu, tf32x3_splitk.cu
// (tests/test_example_kernels.py checks it) ----
#define TX3_THREADS ((BM / WM) * (BN / WN) * 32)
#define TX3_AS (BK + 8)  // As row stride, floats
#define TX3_BS (BN + 4)  // Bs row stride, floats
#define TX3_MI (WM / 16)
#define TX3_NI (WN / 8)
#define TX3_SMEM (STAGES * (BM * TX3_AS + BK * TX3_BS) * 4)

#if (BM % WM) != 0 || (BN % WN) != 0
#error "WM must divide BM and WN must divide BN"
#endif
#if (WM % 16) != 0 || (WN % 16) != 0 || (BK % 8) != 0
#error "WM and WN must be multiples of 16 (BN of 16: conflict-free Bs), BK of 8"
#endif
#if TX3_THREADS < 32 || TX3_THREADS > 1024
#error "threads per block (BM/WM)*(BN/WN)*32 must be in [32, 1024]"
#endif
#if STAGES < 2
#error "a pipeline needs at least two stages"
#endif
#if TX3_SMEM > 232448
#error "STAGES * (BM*(BK+8) + BK*(BN+4)) * 4 bytes exceeds the 227 KiB of shared memory a block may opt into"
#endif
// Registers: accumulators (twice with FLUSH), big and small fragments of A and B,
// ~40 for addresses and staging; must fit min(255, 65536 / (MINB * threads)).
#define TX3_REGS (TX3_MI * TX3_NI * 4 * (1 + FLUSH) + TX3_MI * 8 + TX3_NI * 4 + 40)
#if TX3_REGS > 255 || TX3_REGS > 65536 / (MINB * TX3_THREADS)
#error "accumulators + fragments do not fit the registers of MINB blocks per SM"
#endif

__device__ __forceinline__ unsigned tx3_smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 (or 4) bytes global -> shared; `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void tx3_cp16(float* dst, const float* src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tx3_smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void tx3_cp4(float* dst, const float* src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(tx3_smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}

// x = big + small + O(2^-22 |x|), big and small TF32 rounded to nearest, ties away
// from zero: what cvt.rna.tf32.f32 gives for finite x, in two integer instructions
// (add half a TF32 ulp to the magnitude bits, clear the 13 low bits) instead of its
// four (ptxas guards it against inf/NaN with a compare and a select). Not for inf
// inputs (they become NaN); NaN stays NaN through the small part.
__device__ __forceinline__ void tx3_split(float x, unsigned& big, unsigned& small)
{
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    const float rest = x - __uint_as_float(big);  // exact
    small = (__float_as_uint(rest) + 0x1000u) & 0xffffe000u;
}

// d = a * b + c on one m16n8k8 tile (TF32 in, fp32 accumulate).
__device__ __forceinline__ void tx3_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                        const float (&c)[4])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// One BK slice of A (BM x BK, rows bm0.., cols k0..) and B (BK x BN) into stage
// buffers; elements at or past M, N or kend are zeros.
template <bool VEC>
__device__ __forceinline__ void tx3_load_slice(const float* __restrict__ A, const float* __restrict__ B,
                                               float* as, float* bs, int M, int N, int K, int kend,
                                               int bm0, int bn0, int k0)
{
    if (VEC) {
#pragma unroll
        for (int c = threadIdx.x; c < BM * BK / 4; c += TX3_THREADS) {
            const int r = c / (BK / 4), k = (c % (BK / 4)) * 4;
            const bool ok = bm0 + r < M && k0 + k < kend;
            tx3_cp16(as + r * TX3_AS + k, ok ? A + (size_t)(bm0 + r) * K + k0 + k : A, ok ? 16 : 0);
        }
#pragma unroll
        for (int c = threadIdx.x; c < BK * BN / 4; c += TX3_THREADS) {
            const int r = c / (BN / 4), n = (c % (BN / 4)) * 4;
            const bool ok = k0 + r < kend && bn0 + n < N;
            tx3_cp16(bs + r * TX3_BS + n, ok ? B + (size_t)(k0 + r) * N + bn0 + n : B, ok ? 16 : 0);
        }
    } else {
        for (int e = threadIdx.x; e < BM * BK; e += TX3_THREADS) {
            const int r = e / BK, k = e % BK;
            const bool ok = bm0 + r < M && k0 + k < kend;
            tx3_cp4(as + r * TX3_AS + k, ok ? A + (size_t)(bm0 + r) * K + k0 + k : A, ok ? 4 : 0);
        }
        for (int e = threadIdx.x; e < BK * BN; e += TX3_THREADS) {
            const int r = e / BN, n = e % BN;
            const bool ok = k0 + r < kend && bn0 + n < N;
            tx3_cp4(bs + r * TX3_BS + n, ok ? B + (size_t)(k0 + r) * N + bn0 + n : B, ok ? 4 : 0);
        }
    }
}

// acc (the warp's WM x WN piece, fragment layout) = A[bm0.., kbeg:kend] @ B[kbeg:kend, bn0..].
template <bool VEC>
__device__ __forceinline__ void tx3_mainloop(const float* __restrict__ A, const float* __restrict__ B,
                                             int M, int N, int K, int kbeg, int kend, int bm0, int bn0,
                                             float* smem, float (&acc)[TX3_MI][TX3_NI][4])
{
    float* a_tiles = smem;
    float* b_tiles = smem + STAGES * BM * TX3_AS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};

    const int tiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles)
            tx3_load_slice<VEC>(A, B, a_tiles + s * BM * TX3_AS, b_tiles + s * BK * TX3_BS, M, N, K, kend,
                                bm0, bn0, kbeg + s * BK);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }

    for (int tile = 0; tile < tiles; ++tile) {
        // Slice `tile` has landed (at most STAGES-2 younger groups pending), and every
        // warp is done with slice tile-1, whose stage the next copy overwrites.
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2) : "memory");
        __syncthreads();
        const int next = tile + STAGES - 1;
        if (next < tiles)
            tx3_load_slice<VEC>(A, B, a_tiles + (next % STAGES) * BM * TX3_AS,
                                b_tiles + (next % STAGES) * BK * TX3_BS, M, N, K, kend, bm0, bn0,
                                kbeg + next * BK);
        asm volatile("cp.async.commit_group;\n" ::: "memory");

        const float* as = a_tiles + (tile % STAGES) * BM * TX3_AS + (wm + g) * TX3_AS + 2 * t;
        const float* bs = b_tiles + (tile % STAGES) * BK * TX3_BS + 2 * t * TX3_BS + wn + g;
#if FLUSH
        float part[TX3_MI][TX3_NI][4];
#else
        float (&part)[TX3_MI][TX3_NI][4] = acc;
#endif
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned a_big[TX3_MI][4], a_small[TX3_MI][4], b_big[TX3_NI][2], b_small[TX3_NI][2];
#pragma unroll
            for (int i = 0; i < TX3_MI; ++i) {
                // Rows g and g+8 of m-tile i, physical k 2t and 2t+1: (a0, a2) and (a1, a3).
                const float2 lo = *reinterpret_cast<const float2*>(as + i * 16 * TX3_AS + kk);
                const float2 hi = *reinterpret_cast<const float2*>(as + (i * 16 + 8) * TX3_AS + kk);
                tx3_split(lo.x, a_big[i][0], a_small[i][0]);
                tx3_split(hi.x, a_big[i][1], a_small[i][1]);
                tx3_split(lo.y, a_big[i][2], a_small[i][2]);
                tx3_split(hi.y, a_big[i][3], a_small[i][3]);
            }
#pragma unroll
            for (int j = 0; j < TX3_NI; ++j) {
                // Column g of n-tile j, physical k 2t (b0) and 2t+1 (b1).
                tx3_split(bs[kk * TX3_BS + j * 8], b_big[j][0], b_small[j][0]);
                tx3_split(bs[(kk + 1) * TX3_BS + j * 8], b_big[j][1], b_small[j][1]);
            }
            // Small terms first, then big * big; each pass is MI*NI independent mmas.
#pragma unroll
            for (int i = 0; i < TX3_MI; ++i)
#pragma unroll
                for (int j = 0; j < TX3_NI; ++j)
                    if (FLUSH && kk == 0)
                        tx3_mma(part[i][j], a_small[i], b_big[j], zero);
                    else
                        tx3_mma(part[i][j], a_small[i], b_big[j], part[i][j]);
#pragma unroll
            for (int i = 0; i < TX3_MI; ++i)
#pragma unroll
                for (int j = 0; j < TX3_NI; ++j)
                    tx3_mma(part[i][j], a_big[i], b_small[j], part[i][j]);
#pragma unroll
            for (int i = 0; i < TX3_MI; ++i)
#pragma unroll
                for (int j = 0; j < TX3_NI; ++j)
                    tx3_mma(part[i][j], a_big[i], b_big[j], part[i][j]);
        }
#if FLUSH
        // The slice's sum joins the running sum with a round-to-nearest add.
#pragma unroll
        for (int i = 0; i < TX3_MI; ++i)
#pragma unroll
            for (int j = 0; j < TX3_NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
#endif
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// This block's C tile: with GROUP > 1 consecutive blocks walk GROUP tile rows down
// a column, so the blocks resident together share A and B panels in L2.
__device__ __forceinline__ void tx3_tile(int& bm0, int& bn0)
{
    int tm = blockIdx.y, tn = blockIdx.x;
    if (GROUP > 1) {
        const int id = blockIdx.y * gridDim.x + blockIdx.x, per_group = GROUP * gridDim.x;
        const int first = (id / per_group) * GROUP;
        const int rows = min((int)gridDim.y - first, GROUP);
        tm = first + (id % per_group) % rows;
        tn = (id % per_group) / rows;
    }
    bm0 = tm * BM;
    bn0 = tn * BN;
}

// acc = A[bm0.., kbeg:kend] @ B[kbeg:kend, bn0..] for this thread's fragments.
__device__ __forceinline__ void tx3_gemm(const float* __restrict__ A, const float* __restrict__ B,
                                         int M, int N, int K, int kbeg, int kend, int bm0, int bn0,
                                         float* smem, float (&acc)[TX3_MI][TX3_NI][4])
{
#pragma unroll
    for (int i = 0; i < TX3_MI; ++i)
#pragma unroll
        for (int j = 0; j < TX3_NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    // 16-byte copies need 4-float rows (K, N) and 16-byte aligned bases; uniform per launch.
    const bool vec = (K & 3) == 0 && (N & 3) == 0 &&
                     ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15ull) == 0;
    if (vec)
        tx3_mainloop<true>(A, B, M, N, K, kbeg, kend, bm0, bn0, smem, acc);
    else
        tx3_mainloop<false>(A, B, M, N, K, kbeg, kend, bm0, bn0, smem, acc);
}

// C[bm0.., bn0..] = acc, or relu(acc + bias[col]) when `bias` is given; every element
// bounds-checked; c0, c1 at (g, 2t + {0,1}), c2, c3 eight rows below, as a float2
// where the pair is whole and C's rows are 8-byte aligned.
__device__ __forceinline__ void tx3_store(float* __restrict__ C, const float* __restrict__ bias,
                                          const float (&acc)[TX3_MI][TX3_NI][4], int M, int N, int bm0, int bn0)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
    const bool vec2 = (N & 1) == 0 && (reinterpret_cast<unsigned long long>(C) & 7ull) == 0;
#pragma unroll
    for (int j = 0; j < TX3_NI; ++j) {
        const int col = bn0 + wn + j * 8 + 2 * t;
        float b0 = 0.0f, b1 = 0.0f;
        if (bias) {
            if (col < N) b0 = __ldg(bias + col);
            if (col + 1 < N) b1 = __ldg(bias + col + 1);
        }
#pragma unroll
        for (int i = 0; i < TX3_MI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = bm0 + wm + i * 16 + g + h * 8;
                if (row >= M) continue;
                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (bias) {
                    v0 = fmaxf(v0 + b0, 0.0f);
                    v1 = fmaxf(v1 + b1, 0.0f);
                }
                float* p = C + (size_t)row * N + col;
                if (vec2 && col + 1 < N) {
                    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
                } else {
                    if (col < N) p[0] = v0;
                    if (col + 1 < N) p[1] = v1;
                }
            }
    }
}
// ---- end of the tf32x3 body ----

// dst (drows x dcols, dcols % 4 == 0, 16-byte aligned) = src (rows x cols, densely
// packed) with zeros past its rows and columns; float4 stores, any grid.
extern "C" __global__ void __launch_bounds__(256)
pad_rows(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols, int drows, int dcols)
{
    const int q = dcols / 4;
    const long long n4 = (long long)drows * q;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / q), c = (int)(i % q) * 4;
        const float* s = src + (size_t)r * (size_t)cols + c;
        const bool row = r < rows;
        float4 v;
        v.x = row && c < cols ? s[0] : 0.0f;
        v.y = row && c + 1 < cols ? s[1] : 0.0f;
        v.z = row && c + 2 < cols ? s[2] : 0.0f;
        v.w = row && c + 3 < cols ? s[3] : 0.0f;
        reinterpret_cast<float4*>(dst)[i] = v;
    }
}

extern "C" __global__ void __launch_bounds__(TX3_THREADS, MINB)
gemm_bias_relu_tf32x3_padded(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
    float* __restrict__ C, int M, int N, int Np, int Kp)
{
    extern __shared__ __align__(16) float tx3_smem[];
    int bm0, bn0;
    tx3_tile(bm0, bn0);
    float acc[TX3_MI][TX3_NI][4];
    tx3_gemm(A, B, M, Np, Kp, 0, Kp, bm0, bn0, tx3_smem, acc);
    tx3_store(C, bias, acc, M, N, bm0, bn0);
}
