// sgemm_warptile: warp-tiled, double-buffered fp32 SGEMM (plain FFMA: no tensor
// cores, no TF32). C[M,N] = A[M,K] @ B[K,N], all row-major, densely packed.
// Correct for arbitrary positive M, N, K.
//
// Launch rule:
//   block  = ((BM/WM) * (BN/WN) * 32, 1, 1)
//   grid   = (ceil_div(N, BN), ceil_div(M, BM), 1)
//   shared = 0   (static only: 2 * (BK*(BM+4) + BK*BN) floats <= 48 KiB)
//
// Decomposition (after siboehm's "warptiling" SGEMM, plus double buffering):
//   block  BM x BN tile of C, stepping through K in BK slices;
//   warp   WM x WN sub-tile of the block tile (warps laid out row-major);
//   lane   the 32 lanes of a warp form an 8 (along M) x 4 (along N) grid; each
//          lane owns 4x4 micro-tiles of C, repeated WM/32 times along M
//          (stride 32) and WN/16 times along N (stride 16): WM*WN/32 results.
//
// Knob constraints (violations fail at compile time, so the tuner skips them):
//   WM | BM, WN | BN, WM % 32 == 0, WN % 16 == 0, BK % 8 == 0 (BK even is
//   also what the fragment double-buffering assumes);
//   32 <= threads <= 1024; static shared memory <= 48 KiB;
//   WM*WN/32 <= 128 accumulators; a register estimate must fit
//   min(255, 65536 / (MINB * threads)); at most 8 staged float4s per thread and
//   accumulators * staged float4s <= 512. The register limits were fitted to
//   ptxas (sm_90) over every declared combination before the unchecked
//   interior copy of the body existed (then none of 115 spilled). With it, of
//   the 230 that compile (GROUP doubles them) 16 spill 8-32 bytes, all at a
//   64- or 128-register cap, the default among them (32 B; measured as fast
//   as before, 3.2548 against 3.2545 ms at 4096^3). The 16x8 tiles do not.
//
// Default: 128x128x8 block, 64x32 warp tile (256 threads, 8x8 results per
// thread), MINB=2 (ptxas caps registers at 128 so two blocks share an SM and
// hide each other's barriers). Measured on an H200 (cold L2, cuBLAS fp32 =
// 2.68 ms at 4096^3): 3.25 ms (0.82x) at 4096^3, 0.83x at 2048x8192x1024. It
// is the best compromise over the five performance cases, not the best for
// any one of them. For 4096^3 alone (`run --cases square-4096`) the tuner
// found BM=128 BN=128 BK=8 WM=128 WN=32 MINB=2: 128 threads, 16x8 results per
// thread, ~236 registers, 2.96 ms (0.90x); with GROUP=16, 2.92-2.94 ms
// (0.91-0.92x). Small problems prefer smaller tiles (more blocks): e.g.
// BM=64 BN=128 BK=16 WM=64 WN=16 is 0.90x at 1024^3, and M=128 wants BM=64.
//
// Why it is built this way:
// - 4x4 micro-tiles at strides 32 (M) and 16 (N), rather than one contiguous
//   8x8: every fragment read is a float4 whose 8 (A) or 4 (B) distinct addresses
//   across the warp lie in one 128-byte row segment of shared memory, so it is
//   conflict-free and mostly broadcast; C stores are float4 as well.
// - A is stored transposed (As[k][m]) so both operands are read as float4 along
//   the dimension each thread needs (one shared load per 4 FFMA-columns).
// - A-tile loads pair two lanes per 32-byte sector of an A row (slot bit 0 picks
//   the half, the next bits walk rows, higher bits walk sectors along k): every
//   global sector is fully used, and the transposed scalar stores of a warp hit
//   16 consecutive rows for each half. Padding As rows to BM+4 floats (== 4 mod 8)
//   moves the second half 16 banks over, so those stores are conflict-free for
//   any BK, while float4 reads stay 16-byte aligned.
// - Two shared-memory stages, with the next slice held in registers: its global
//   loads are issued before the current slice's FFMAs, so their latency hides
//   behind the math, and only one __syncthreads per slice is needed (the slice
//   written in iteration t is the one nobody reads until after that barrier).
// - Fragments are double-buffered in registers and the slice switch (store,
//   barrier, first fragment reads of the new slice) sits before the last k
//   step's FFMAs, so the barrier and the shared-memory latency overlap math:
//   measured 4-7% faster than switching after the last step.
// - MINB (__launch_bounds__ min blocks) is a knob: 2 caps registers so two
//   256-thread blocks fit an SM, which the default needs; 1 lets big tiles use
//   up to 255 registers.
// - float4 global loads are legal only when each row starts 16-byte aligned:
//   A needs K % 4 == 0, B needs N % 4 == 0 (and aligned base pointers). Then a
//   float4 is wholly in or out of the matrix, because k and n offsets are
//   multiples of 4. Otherwise the same slots are filled element by element with
//   bounds checks. Out-of-range elements are zero-filled in BOTH operands, so the
//   tail slice never multiplies stale shared memory (possibly NaN) by zero.
// - The vector/scalar choice is uniform per launch: no divergence.
// - size_t row offsets: M*K or K*N may exceed 2^31 elements.
// - Interior blocks of aligned problems whose K is a multiple of BK (uniform per
//   block) run a copy of the body with every bounds check and scalar fallback
//   compiled out (the FULL template flag). In SASS the checks were ~100 of the
//   ~670 instructions of a 128x128x8 slice; without them the 16x8 tile's main
//   loop is 90% FFMA. The default tile did not get faster from it (latency-,
//   not issue-bound) and its FULL copy spills a few bytes at the 128-register
//   cap; the 16x8 tile reached 0.90x with it.
// - GROUP: blocks are rasterised GROUP tile rows at a time down each column, so
//   the blocks resident together share A and B panels in L2 (1-1.5% at 4096^3
//   for the 16x8 tile). GROUP=1 is the plain grid order.
// - Tried and dropped: cp.async for the slices (four 4-byte copies per A float4,
//   for the transpose). ptxas sinks the staged LDGs to just before their STS
//   (ncu: long_scoreboard 0.3 cycles/instruction), which cp.async would avoid,
//   but the 4-byte copies cost more: 3.42 ms against 2.94 ms at 4096^3, with
//   2.2e8 shared-store bank conflicts (1.8e5 without) and short_scoreboard
//   stalls doubling.

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
                                                    int M, int N, int K,
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
                        if (gc < K) v = __ldg(reinterpret_cast<const float4*>(p));
                    } else {
                        if (gc + 0 < K) v.x = __ldg(p + 0);
                        if (gc + 1 < K) v.y = __ldg(p + 1);
                        if (gc + 2 < K) v.z = __ldg(p + 2);
                        if (gc + 3 < K) v.w = __ldg(p + 3);
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
                } else if (gr < K) {
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

    const int ntiles = (K + BK - 1) / BK;

    load_global(0);
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
        if (more) load_global((t + 1) * BK);

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
sgemm_warptile(const float* __restrict__ A,
               const float* __restrict__ B,
               float* __restrict__ C,
               int M, int N, int K)
{
    // Declared here, not in the body: each instantiation would get its own copy.
    __shared__ __align__(16) float As[2][BK][BM + 4];   // BM+4: see header, conflict-free transposed stores
    __shared__ __align__(16) float Bs[2][BK][BN];

    const bool vecA = ((K & 3) == 0) && ((reinterpret_cast<unsigned long long>(A) & 15ull) == 0);
    const bool vecB = ((N & 3) == 0) && ((reinterpret_cast<unsigned long long>(B) & 15ull) == 0);
    const bool vecC = ((N & 3) == 0) && ((reinterpret_cast<unsigned long long>(C) & 15ull) == 0);
    // GROUP > 1: consecutive blocks walk GROUP tile rows down a column before moving
    // right, so the blocks resident together share A and B panels in L2.
    int tm = blockIdx.y, tn = blockIdx.x;
    if (GROUP > 1) {
        const int id = blockIdx.y * gridDim.x + blockIdx.x, per_group = GROUP * gridDim.x;
        const int first = (id / per_group) * GROUP;
        const int rows = min((int)gridDim.y - first, GROUP);
        tm = first + (id % per_group) % rows;
        tn = (id % per_group) / rows;
    }
    const int bm0 = tm * BM, bn0 = tn * BN;
    // Uniform per block: interior blocks of aligned, tile-multiple problems take the unchecked path.
    const bool full = vecA && vecB && vecC && K > 0 && (K % BK) == 0 && bm0 + BM <= M && bn0 + BN <= N;
    if (full)
        sgemm_warptile_body<true>(A, B, C, M, N, K, As, Bs, vecA, vecB, vecC, bm0, bn0);
    else
        sgemm_warptile_body<false>(A, B, C, M, N, K, As, Bs, vecA, vecB, vecC, bm0, bn0);
}
