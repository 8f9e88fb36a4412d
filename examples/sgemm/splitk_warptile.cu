// sgemm_splitk_wt: split-K fp32 SGEMM on the warp-tiled body of warptile.cu, as a
// program of two launches (plain FFMA: no tensor cores, no TF32).
// C[M,N] = A[M,K] @ B[K,N], all row-major, densely packed, any positive M, N, K.
//
// When M x N gives few C tiles and K is long (128x4096x4096: 32 tiles of 128x128;
// 256x256x131072: 4), one block per tile leaves most of the 132 SMs idle.
// splitk.cu fixes that on the simpler register-tiled body (0.24x cuBLAS at
// 256x256x131072); this is the same split over warptile.cu's body (double-
// buffered slices, 4x4 micro-tiles at strides 32/16, unchecked interior copy).
//
// Program (workload.toml, [kernels.splitk_warptile]):
//   workspace partial: SPLITK * M * N floats, poisoned (every element is written)
//   1. sgemm_splitk_wt_partial
//        grid   = (ceil_div(N, BN), ceil_div(M, BM), SPLITK)
//        block  = ((BM/WM) * (BN/WN) * 32, 1, 1), shared = 0 (static, as warptile.cu)
//        args   A, B, partial, M, N, K, kchunk = ceil_div(ceil_div(K, SPLITK), BK) * BK
//      block (x, y, z) computes the BM x BN tile of A[:, z*kchunk : (z+1)*kchunk] @
//      B[z*kchunk : (z+1)*kchunk, :] into plane z of partial (M x N, row-major).
//      kchunk is a multiple of BK (so of 8): a float4 of A never straddles two
//      slices, and every slice but the last is whole (the unchecked body runs on
//      interior tiles of aligned problems whenever the slice is a BK multiple).
//      A plane whose slice starts past K (SPLITK * kchunk > K) is written with zeros.
//   2. sgemm_splitk_wt_reduce
//        grid   = (ceil_div(M * N, 1024), 1, 1), block = (256, 1, 1) (grid-stride)
//        args   partial, C, M * N (i64), SPLITK
//      C[i] = partial[0][i] + partial[1][i] + ... in order z = 0, 1, ...
//      (deterministic); one float4 of C per thread when M * N % 4 == 0 and the
//      buffers are 16-byte aligned, else four bounds-checked scalars.
//
// Knob constraints: those of warptile.cu (below, enforced by #error, so the tuner
// skips what does not compile), plus SPLITK >= 1. SPLITK = 1 is warptile.cu plus
// a copy. The partial traffic is 2 * SPLITK * M * N floats (8 MB at SPLITK = 8 on
// 128x4096, mostly L2-resident between the two launches), against the
// 4 * (M * K + K * N) bytes of the operands.
// Choosing (for the tuner or a person): SPLITK * tiles should be 1-2 waves of
// blocks (132 SMs x blocks per SM); e.g. 128x4096x4096 with BM=64 BN=128: 64
// tiles, SPLITK 4-8; 256x256x131072 with BM=BN=64: 16 tiles, SPLITK 16-32.

// knob SPLITK: 1 2 4 8 16 32 64
#ifndef SPLITK
#define SPLITK 8
#endif

// The knobs, their constraints and the body are warptile.cu's (its header says why
// the body is built this way); the body's K range is [kbeg, kend) instead of [0, K).

// knob BM: 64 128 256
#ifndef BM
#define BM 128
#endif

// knob BN: 64 128 256
#ifndef BN
#define BN 128
#endif

// knob BK: 8 16 32
#ifndef BK
#define BK 8
#endif

// knob WM: 32 64 128
#ifndef WM
#define WM 64
#endif

// knob WN: 16 32 64
#ifndef WN
#define WN 32
#endif

// knob MINB: 1 2
#ifndef MINB
#define MINB 2
#endif

// knob GROUP: 1 16
#ifndef GROUP
#define GROUP 1
#endif

#define SGEMM_WT_THREADS ((BM / WM) * (BN / WN) * 32)

#if (BM % WM) != 0 || (BN % WN) != 0
#error "WM must divide BM and WN must divide BN"
#endif
#if (WM % 32) != 0 || (WN % 16) != 0
#error "WM must be a multiple of 32 and WN a multiple of 16 (8x4 lanes of 4x4 micro-tiles)"
#endif
#if (BK % 8) != 0
#error "BK must be a multiple of 8 (two lanes per 32-byte sector of an A row)"
#endif
#if SGEMM_WT_THREADS < 32 || SGEMM_WT_THREADS > 1024
#error "threads per block (BM/WM)*(BN/WN)*32 must be in [32, 1024]"
#endif
#if 2 * (BK * (BM + 4) + BK * BN) * 4 > 48 * 1024
#error "double-buffered static shared memory 2*(BK*(BM+4)+BK*BN)*4 must stay within 48 KiB"
#endif
#if WM * WN / 32 > 128
#error "at most 128 accumulators per thread (WM*WN <= 4096)"
#endif
// Registers: accumulators + the next slice's float4s (LA + LB per thread) + two
// sets of fragments + ~24 for addresses must fit min(255, 65536 / (MINB *
// threads)). The last two limits keep large tiles with deep staging out: those
// spill. Checked against ptxas for every declared combination: none admitted
// spills.
#define SGEMM_WT_LA ((BM * BK / 4 + SGEMM_WT_THREADS - 1) / SGEMM_WT_THREADS)
#define SGEMM_WT_LB ((BK * BN / 4 + SGEMM_WT_THREADS - 1) / SGEMM_WT_THREADS)
#define SGEMM_WT_REGS (WM * WN / 32 + 4 * (SGEMM_WT_LA + SGEMM_WT_LB) + 8 * (WM / 32 + WN / 16) + 24)
#if SGEMM_WT_REGS > 255 || SGEMM_WT_REGS > 65536 / (MINB * SGEMM_WT_THREADS)
#error "accumulators + staged slice + fragments do not fit the registers of MINB blocks per SM"
#endif
#if SGEMM_WT_LA + SGEMM_WT_LB > 8 || (WM * WN / 32) * (SGEMM_WT_LA + SGEMM_WT_LB) > 512
#error "too many staged float4s per thread for this warp tile (ptxas spills)"
#endif

// FULL: the block's tiles lie wholly inside A, B and C, every K slice is whole
// and all three matrices take float4 accesses, so the main loop and the epilogue
// carry no bounds checks and no scalar fallbacks. The checks cost ~100 of the
// ~670 instructions of a 128x128x8 slice (76% FFMA) and an FFMA-bound loop issues
// one instruction per clock, so dropping them is worth ~15% on big GEMMs.
template <bool FULL>
__device__ __forceinline__ void sgemm_warptile_body(const float* __restrict__ A,
                                                    const float* __restrict__ B,
                                                    float* __restrict__ C,
                                                    int M, int N, int K, int kbeg, int kend,
                                                    float (&As)[2][BK][BM + 4],
                                                    float (&Bs)[2][BK][BN],
                                                    bool vecA, bool vecB, bool vecC,
                                                    int bm0, int bn0)
{
    constexpr int NT     = SGEMM_WT_THREADS;
    constexpr int WMITER = WM / 32;         // micro-tiles along M per lane
    constexpr int WNITER = WN / 16;         // micro-tiles along N per lane
    constexpr int SA     = BM * BK / 4;     // float4 slots in an A slice
    constexpr int SB     = BK * BN / 4;     // float4 slots in a B slice
    constexpr int LA     = SGEMM_WT_LA;     // A float4s staged per thread
    constexpr int LB     = SGEMM_WT_LB;     // B float4s staged per thread

    const int tid  = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    // First As column / Bs column of this lane's micro-tiles (block-relative).
    const int am = (warp / (BN / WN)) * WM + (lane >> 2) * 4;
    const int bn = (warp % (BN / WN)) * WN + (lane & 3) * 4;

    float4 ra[LA];
    float4 rb[LB];

    // Slot i of the A slice -> row r (of BM), first column c (of BK, multiple of 4).
    auto a_slot = [](int i, int& r, int& c) {
        const int rest = i >> 1;
        r = rest % BM;
        c = (((rest / BM) << 1) | (i & 1)) << 2;
    };

    auto load_global = [&](int k0) {
#pragma unroll
        for (int it = 0; it < LA; ++it) {
            const int i = tid + it * NT;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (SA % NT == 0 || i < SA) {
                int r, c;
                a_slot(i, r, c);
                const int gr = bm0 + r;
                const int gc = k0 + c;
                if (FULL) {
                    v = __ldg(reinterpret_cast<const float4*>(A + (size_t)gr * K + gc));
                } else if (gr < M) {
                    const float* p = A + (size_t)gr * K + gc;
                    if (vecA) {
                        if (gc < kend) v = __ldg(reinterpret_cast<const float4*>(p));
                    } else {
                        if (gc + 0 < kend) v.x = __ldg(p + 0);
                        if (gc + 1 < kend) v.y = __ldg(p + 1);
                        if (gc + 2 < kend) v.z = __ldg(p + 2);
                        if (gc + 3 < kend) v.w = __ldg(p + 3);
                    }
                }
            }
            ra[it] = v;
        }
#pragma unroll
        for (int it = 0; it < LB; ++it) {
            const int i = tid + it * NT;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (SB % NT == 0 || i < SB) {
                const int r  = i / (BN / 4);
                const int c  = (i % (BN / 4)) * 4;
                const int gr = k0 + r;
                const int gc = bn0 + c;
                if (FULL) {
                    v = __ldg(reinterpret_cast<const float4*>(B + (size_t)gr * N + gc));
                } else if (gr < kend) {
                    const float* p = B + (size_t)gr * N + gc;
                    if (vecB) {
                        if (gc < N) v = __ldg(reinterpret_cast<const float4*>(p));
                    } else {
                        if (gc + 0 < N) v.x = __ldg(p + 0);
                        if (gc + 1 < N) v.y = __ldg(p + 1);
                        if (gc + 2 < N) v.z = __ldg(p + 2);
                        if (gc + 3 < N) v.w = __ldg(p + 3);
                    }
                }
            }
            rb[it] = v;
        }
    };

    auto store_shared = [&](int buf) {
#pragma unroll
        for (int it = 0; it < LA; ++it) {
            const int i = tid + it * NT;
            if (SA % NT == 0 || i < SA) {
                int r, c;
                a_slot(i, r, c);
                As[buf][c + 0][r] = ra[it].x;
                As[buf][c + 1][r] = ra[it].y;
                As[buf][c + 2][r] = ra[it].z;
                As[buf][c + 3][r] = ra[it].w;
            }
        }
#pragma unroll
        for (int it = 0; it < LB; ++it) {
            const int i = tid + it * NT;
            if (SB % NT == 0 || i < SB) {
                const int r = i / (BN / 4);
                const int c = (i % (BN / 4)) * 4;
                *reinterpret_cast<float4*>(&Bs[buf][r][c]) = rb[it];
            }
        }
    };

    float acc[WMITER][4][WNITER][4];
#pragma unroll
    for (int im = 0; im < WMITER; ++im)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int in = 0; in < WNITER; ++in)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    acc[im][i][in][j] = 0.0f;

    // Fragments of one k step: As/Bs float4 reads at the lane's micro-tile origins.
    auto load_frag = [&](int buf, int kk, float (&a)[WMITER][4], float (&b)[WNITER][4]) {
#pragma unroll
        for (int im = 0; im < WMITER; ++im) {
            const float4 v = *reinterpret_cast<const float4*>(&As[buf][kk][am + im * 32]);
            a[im][0] = v.x; a[im][1] = v.y; a[im][2] = v.z; a[im][3] = v.w;
        }
#pragma unroll
        for (int in = 0; in < WNITER; ++in) {
            const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][kk][bn + in * 16]);
            b[in][0] = v.x; b[in][1] = v.y; b[in][2] = v.z; b[in][3] = v.w;
        }
    };

    const int ntiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;

    load_global(kbeg);
    store_shared(0);
    __syncthreads();

    // Fragments are double-buffered in registers: step kk+1 is read from shared
    // memory while step kk's FFMAs run. The slice switch sits inside the last
    // step (store the staged slice, barrier, read the new slice's first
    // fragments, then the last step's FFMAs), so the barrier and the first
    // shared-memory latency of a slice overlap math instead of stalling.
    float a[2][WMITER][4];
    float b[2][WNITER][4];
    int buf = 0;
    load_frag(0, 0, a[0], b[0]);

    for (int t = 0; t < ntiles; ++t) {
        const bool more = t + 1 < ntiles;   // uniform across the block
        // Next slice's global loads first: their latency overlaps the FFMAs below.
        if (more) load_global(kbeg + (t + 1) * BK);

#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk < BK - 1) {
                load_frag(buf, kk + 1, a[(kk + 1) & 1], b[(kk + 1) & 1]);
            } else if (more) {
                // buf^1 was last read before the previous slice's barrier: free.
                store_shared(buf ^ 1);
                __syncthreads();
                buf ^= 1;
                load_frag(buf, 0, a[0], b[0]);   // BK is even: step 0 uses set 0
            }
#pragma unroll
            for (int im = 0; im < WMITER; ++im)
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int in = 0; in < WNITER; ++in)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            acc[im][i][in][j] = fmaf(a[kk & 1][im][i], b[kk & 1][in][j], acc[im][i][in][j]);
        }
    }

    // Bounds-checked epilogue: float4 stores where the whole quad is inside C.
#pragma unroll
    for (int im = 0; im < WMITER; ++im) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int gr = bm0 + am + im * 32 + i;
            if (!FULL && gr >= M) continue;
            float* crow = C + (size_t)gr * N;
#pragma unroll
            for (int in = 0; in < WNITER; ++in) {
                const int gc = bn0 + bn + in * 16;
                if (FULL || (vecC && gc + 3 < N)) {
                    *reinterpret_cast<float4*>(crow + gc) =
                        make_float4(acc[im][i][in][0], acc[im][i][in][1],
                                    acc[im][i][in][2], acc[im][i][in][3]);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (gc + j < N) crow[gc + j] = acc[im][i][in][j];
                }
            }
        }
    }
}


extern "C" __global__ void __launch_bounds__(SGEMM_WT_THREADS, MINB)
sgemm_splitk_wt_partial(const float* __restrict__ A,
                        const float* __restrict__ B,
                        float* __restrict__ partial,
                        int M, int N, int K, int kchunk)
{
    // Declared here, not in the body: each instantiation would get its own copy.
    __shared__ __align__(16) float As[2][BK][BM + 4];   // BM+4: conflict-free transposed stores (warptile.cu)
    __shared__ __align__(16) float Bs[2][BK][BN];

    // This block's slice of K, clamped to [0, K]: an empty slice writes zeros.
    const long long kb = (long long)blockIdx.z * kchunk;
    const int kbeg = (int)(kb < K ? kb : K);
    const int kend = (int)(kb + kchunk < K ? kb + kchunk : K);
    float* __restrict__ C = partial + (size_t)blockIdx.z * M * N;

    const bool vecA = ((K & 3) == 0) && ((reinterpret_cast<unsigned long long>(A) & 15ull) == 0);
    const bool vecB = ((N & 3) == 0) && ((reinterpret_cast<unsigned long long>(B) & 15ull) == 0);
    const bool vecC = ((N & 3) == 0) && ((reinterpret_cast<unsigned long long>(C) & 15ull) == 0);
    // GROUP > 1: consecutive blocks of a plane walk GROUP tile rows down a column.
    int tm = blockIdx.y, tn = blockIdx.x;
    if (GROUP > 1) {
        const int id = blockIdx.y * gridDim.x + blockIdx.x, per_group = GROUP * gridDim.x;
        const int first = (id / per_group) * GROUP;
        const int rows = min((int)gridDim.y - first, GROUP);
        tm = first + (id % per_group) % rows;
        tn = (id % per_group) / rows;
    }
    const int bm0 = tm * BM, bn0 = tn * BN;
    // Uniform per block: interior tiles of aligned problems over a whole number of BK slices.
    const bool full = vecA && vecB && vecC && kend > kbeg && ((kend - kbeg) % BK) == 0 &&
                      bm0 + BM <= M && bn0 + BN <= N;
    if (full)
        sgemm_warptile_body<true>(A, B, C, M, N, K, kbeg, kend, As, Bs, vecA, vecB, vecC, bm0, bn0);
    else
        sgemm_warptile_body<false>(A, B, C, M, N, K, kbeg, kend, As, Bs, vecA, vecB, vecC, bm0, bn0);
}

// C = sum over z of partial[z], z in order; quads of C per thread, grid-stride.
extern "C" __global__ void __launch_bounds__(256)
sgemm_splitk_wt_reduce(const float* __restrict__ partial,
                       float* __restrict__ C,
                       long long mn, int splits)
{
    const bool vec = (mn & 3) == 0 &&
                     (((reinterpret_cast<unsigned long long>(partial) | reinterpret_cast<unsigned long long>(C)) & 15ull) == 0);
    const long long quads = (mn + 3) / 4;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < quads; q += stride) {
        if (vec) {
            const float4* p = reinterpret_cast<const float4*>(partial) + q;
            float4 s = __ldcs(p);
#pragma unroll 4
            for (int z = 1; z < splits; ++z) {
                const float4 v = __ldcs(p + z * (mn / 4));
                s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
            }
            reinterpret_cast<float4*>(C)[q] = s;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const long long i = 4 * q + j;
                if (i < mn) {
                    float s = partial[i];
                    for (int z = 1; z < splits; ++z) s += partial[z * mn + i];
                    C[i] = s;
                }
            }
        }
    }
}
