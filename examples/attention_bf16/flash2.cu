// attention_flash2: flash-attention-2 forward on mma.sync (m16n8k16, bf16 in, fp32
// accumulate) with FlashAttention-2's register tiling: each warp owns MT = 2 m16 tiles
// (32 query rows), so every K and V fragment read from shared memory feeds twice as
// many mma as in flash_mma (MT = 1). At 16 rows per warp the kernel reads about as many
// shared-memory bytes per SM as the tensor cores need cycles for their mma (ldmatrix of
// K and V: 512 bytes per 2 mma); at 32 rows that falls to ~60 %, Q fragments included.
// O = softmax(Q K^T / sqrt(D) [causal]) V per head.
//
// Launch rule:
//   block  = (32 * WARPS, 1, 1)
//   grid   = (ceil_div(S, BM) * BH, 1, 1), BM = 16 * MT * WARPS (one block per BM
//            query rows of one head; ORDER says which block gets which)
//   shared = 2 * D * (BM + 4 * BN) bytes (dynamic: Q tile (later the O tile), K and V
//            tiles double-buffered; 96 KiB at D = 128 with the defaults: 2 blocks/SM)
// D is 64 or 128 (one instantiation each; any other D writes nothing).
//
// Per tile of BN keys, each warp:
//   S = Q K^T     Q fragments by ldmatrix, from registers when they fit (QREG, and
//                 D = 64 or MT = 1: at D = 128 and MT = 2, 64 more registers spill),
//                 else re-read from shared memory per k step, as FA2 does
//   softmax       online, in the log2 domain: max of the raw scores over the quad of
//                 lanes sharing a row, p = ex2(s * c - m * c) with c = log2(e)/sqrt(D)
//                 folded into one FFMA; the running sum stays per lane until the end
//   O += P V      P rounded to bf16 in registers: the S accumulator layout of two
//                 n8 tiles is the A-operand layout of one k16 step; V by ldmatrix.trans
// K_{j+1} is loaded with cp.async (16 bytes, zero-filled past S) while S_j and its
// softmax run, V_{j+1} while P V_j runs. Shared rows are XOR-swizzled in 16-byte
// chunks by (row % 8): the 8 rows of every ldmatrix hit 8 different bank groups.
//
// Causal: a block visits keys up to its last row only and masks only the tiles that
// cross its first row's diagonal; a warp skips the math of a tile wholly above its
// rows' diagonal (it still takes part in the loads and barriers). Blocks run
// last-rows-first (the long ones start early, the short ones fill the tail).
// Padding: query rows >= S are not stored (a warp wholly past S skips its math); keys
// >= S are masked to -inf. The output is staged through the warp's own Q rows in
// shared memory and stored in 16-byte rows-contiguous pieces.

#include <cuda_bf16.h>

// knob WARPS: 4 8
#ifndef WARPS
#define WARPS 4
#endif

// knob MT: 2 1
#ifndef MT
#define MT 2
#endif

// knob BN: 64 32 128
#ifndef BN
#define BN 64
#endif

// Keep the Q fragments in registers for the whole key loop where they fit (D = 64, or
// MT = 1); 0 re-reads them from shared memory every tile.
// knob QREG: 1 0
#ifndef QREG
#define QREG 1
#endif

// Block order. 0: the query blocks of one head are consecutive (its K and V stay in L2
// while they run); 1: the heads of one query block are consecutive. 1 by default: on the
// H200 it ran causal 4096/d128 in 0.410 ms against 0.495 with 0 (the long diagonal blocks
// of every head start first), non-causal 0.791 against 0.781.
// knob ORDER: 0 1
#ifndef ORDER
#define ORDER 1
#endif

#define BM (16 * MT * WARPS)
#define NT (32 * WARPS)

#if BN % 16 != 0
#error "BN must be a multiple of 16 (one k step of the P V product)"
#endif
#if MT * BN > 128
#error "MT * BN > 128 spills: at MT = 2, BN = 128 ptxas (sm_90) caps at 255 registers and spills ~600 bytes"
#endif

typedef unsigned int u32;
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ u32 smem_u32(const void* p)
{
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid)
{
    // src-size 0 copies nothing and zero-fills the 16 bytes.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x on the special function unit; ex2(-inf) = +0. (exp2f without --use_fast_math
// adds a denormal fix-up around the same instruction.)
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
    return *reinterpret_cast<u32*>(&v);
}

// Element offset of (row, col) in a [rows][D] bf16 tile, 16-byte chunks swizzled.
template <int D>
__device__ __forceinline__ int swz(int row, int col)
{
    return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// rows x D bf16 from global (rows row0.. of a head) into a swizzled tile; past S
// zero-filled. Thread tid copies chunk tid % CH of rows tid / CH + i * RSTEP: one global
// pointer and one shared address per thread, the rest immediate offsets (the row's
// swizzle is the same for every i, RSTEP being a multiple of 8).
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* head, int row0, int S, int tid)
{
    constexpr int CH = D / 8, RSTEP = NT / CH, N = ROWS / RSTEP;
    static_assert(NT % CH == 0 && RSTEP % 8 == 0 && ROWS % RSTEP == 0, "whole rows of chunks per pass");
    const int r = tid / CH, ch = tid % CH;
    const u32 dst = smem_u32(tile + swz<D>(r, ch * 8));
    const bf16* src = head + (size_t)(row0 + r) * D + ch * 8;
    if (row0 + ROWS <= S) {
#pragma unroll
        for (int i = 0; i < N; ++i)
            cp_async16(dst + i * RSTEP * D * 2, src + i * RSTEP * D, true);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const bool valid = row0 + r + i * RSTEP < S;
            cp_async16(dst + i * RSTEP * D * 2, valid ? src + i * RSTEP * D : head, valid);
        }
    }
}

template <int D>
__device__ __forceinline__ void attention_body(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                               const bf16* __restrict__ v, bf16* __restrict__ o,
                                               int BH, int S, int causal)
{
    constexpr bool QIN = QREG && (MT == 1 || D == 64);
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
    bf16* sK = sQ + BM * D;
    bf16* sV = sK + 2 * BN * D;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nqb = (S + BM - 1) / BM;
#if ORDER == 0
    const int head = blockIdx.x / nqb, qi = blockIdx.x % nqb;
#else
    const int head = blockIdx.x % BH, qi = blockIdx.x / BH;
#endif
    const int qb = causal ? nqb - 1 - qi : qi;
    const int m0 = qb * BM;
    const int w0 = m0 + warp * MT * 16;  // this warp's first query row
    const size_t base = (size_t)head * S * D;
    const int kv_end = causal ? min(S, m0 + BM) : S;
    const int ntiles = (kv_end + BN - 1) / BN;
    const float sl2 = rsqrtf((float)D) * 1.4426950408889634f;  // 1/sqrt(D) * log2(e)
    const float NEG_INF = -__int_as_float(0x7f800000);

    // ldmatrix addresses. A row is D * 2 bytes and every tile starts on a multiple of
    // that, so the swizzled address of (row, 16-byte chunk 2 * kk + b) is the address
    // of (row, chunk b) XOR kk * 32 (the row's own bits sit above the chunk's): one
    // LOP3 per k step of the tile being read, nothing per k step held in registers.
    // Q (A operand): rows lane % 16 of the m16 tile, chunk lane / 16.
    const u32 q_lds = smem_u32(sQ + swz<D>(warp * MT * 16 + (lane & 15), (lane >> 4) * 8));
    // K (B operand of S, not transposed): keys lane % 8 + 8 * (lane / 16), chunk (lane / 8) % 2.
    const u32 k_off = 2 * swz<D>((lane & 7) + ((lane >> 4) << 3), ((lane >> 3) & 1) * 8);
    // V (B operand of P V, transposed): keys lane % 16, chunk lane / 16.
    const u32 v_off = 2 * swz<D>(lane & 15, (lane >> 4) * 8);

    load_tile<D, BM>(sQ, q + base, m0, S, tid);
    load_tile<D, BN>(sK, k + base, 0, S, tid);
    cp_commit();
    load_tile<D, BN>(sV, v + base, 0, S, tid);
    cp_commit();

    u32 qf[QIN ? MT : 1][QIN ? D / 16 : 1][4];
    float acc[MT][D / 8][4];
    float m_i[MT][2], l_i[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[mt][dt][e] = 0.0f;
        m_i[mt][0] = m_i[mt][1] = NEG_INF;
        l_i[mt][0] = l_i[mt][1] = 0.0f;
    }

    for (int j = 0; j < ntiles; ++j) {
        cp_wait<1>();  // K_j (and Q) landed; V_j may still be in flight
        __syncthreads();
        if (QIN && j == 0) {
#pragma unroll
            for (int mt = 0; mt < (QIN ? MT : 1); ++mt)
#pragma unroll
                for (int kk = 0; kk < (QIN ? D / 16 : 1); ++kk) {
                    ldsm_x4((q_lds ^ (kk * 32)) + mt * 16 * D * 2, qf[mt][kk][0], qf[mt][kk][1], qf[mt][kk][2], qf[mt][kk][3]);
                }
        }
        const bool more = j + 1 < ntiles;
        if (more) {  // K_{j+1} into the buffer K_{j-1} left (everyone is past it: barrier above)
            load_tile<D, BN>(sK + ((j + 1) & 1) * BN * D, k + base, (j + 1) * BN, S, tid);
            cp_commit();
        }

        const int n0 = j * BN;
        // Warp-uniform: does this tile hold a key some row of this warp sees?
        const bool active = w0 < S && (!causal || n0 <= w0 + MT * 16 - 1);
        // P in bf16, already in the A-operand layout of P V: packed before the barrier
        // below, so 32 registers (not 64 floats) live across it at MT = 2, BN = 64.
        u32 pa[MT][BN / 16][4];
        if (active) {
            float s[MT][BN / 8][4];
            // S = Q K_j^T
            const u32 kt = smem_u32(sK + (j & 1) * BN * D) + k_off;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        s[mt][nt][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                u32 a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if (QIN) {
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            a[mt][e] = qf[QIN ? mt : 0][QIN ? kk : 0][e];
                    } else {
                        ldsm_x4((q_lds ^ (kk * 32)) + mt * 16 * D * 2, a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
                    }
                }
#pragma unroll
                for (int nn = 0; nn < BN / 16; ++nn) {
                    u32 b0, b1, b2, b3;
                    ldsm_x4((kt ^ (kk * 32)) + nn * 16 * D * 2, b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma_bf16(s[mt][2 * nn], a[mt], b0, b1);
                        mma_bf16(s[mt][2 * nn + 1], a[mt], b2, b3);
                    }
                }
            }

            // Online softmax on the raw scores; the scale is folded into the exponent.
            const bool masked = n0 + BN > S || (causal && n0 + BN - 1 > m0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int row = w0 + mt * 16 + (lane >> 2) + half * 8;
                    float mx = NEG_INF;
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            float x = s[mt][nt][half * 2 + e];
                            if (masked) {
                                const int key = n0 + nt * 8 + (lane & 3) * 2 + e;
                                if (key >= S || (causal && key > row))
                                    x = NEG_INF;
                            }
                            s[mt][nt][half * 2 + e] = x;
                            mx = fmaxf(mx, x);
                        }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m_i[mt][half], mx);
                    const float ms = m_new == NEG_INF ? 0.0f : m_new * sl2;  // a row with nothing unmasked yet
                    const float corr = ex2(m_i[mt][half] * sl2 - ms);         // 0 when m_i was -inf
                    float sum = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float p = ex2(fmaf(s[mt][nt][half * 2 + e], sl2, -ms));
                            s[mt][nt][half * 2 + e] = p;
                            sum += p;
                        }
                    l_i[mt][half] = l_i[mt][half] * corr + sum;
                    m_i[mt][half] = m_new;
#pragma unroll
                    for (int dt = 0; dt < D / 8; ++dt) {
                        acc[mt][dt][half * 2 + 0] *= corr;
                        acc[mt][dt][half * 2 + 1] *= corr;
                    }
                }

            // The S accumulators of keys 16kk..16kk+15 (n8 tiles 2kk, 2kk+1; rows g and
            // g + 8 in elements 0-1 and 2-3) are the A operand of k step kk.
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    pa[mt][kk][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][kk][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][kk][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][kk][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
        }

        if (more) cp_wait<1>(); else cp_wait<0>();  // V_j landed
        __syncthreads();
        if (more) {  // V_{j+1} into the buffer V_{j-1} left
            load_tile<D, BN>(sV + ((j + 1) & 1) * BN * D, v + base, (j + 1) * BN, S, tid);
            cp_commit();
        }

        if (active) {
            // O += P V_j
            const u32 vt = smem_u32(sV + (j & 1) * BN * D) + v_off;
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
                for (int dd = 0; dd < D / 16; ++dd) {
                    u32 b0, b1, b2, b3;
                    ldsm_x4_trans((vt ^ (dd * 32)) + kk * 16 * D * 2, b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma_bf16(acc[mt][2 * dd], pa[mt][kk], b0, b1);
                        mma_bf16(acc[mt][2 * dd + 1], pa[mt][kk], b2, b3);
                    }
                }
            }
        }
    }

    // O / l, rounded once to bf16, into this warp's own Q rows of shared memory (no other
    // warp reads them, and this warp is past its last read), then 16-byte stores of whole
    // rows; rows past S are not stored.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float l = l_i[mt][half];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            const int r = (warp * MT + mt) * 16 + (lane >> 2) + half * 8;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
                *reinterpret_cast<__nv_bfloat162*>(sQ + swz<D>(r, dt * 8 + (lane & 3) * 2)) =
                    __floats2bfloat162_rn(acc[mt][dt][half * 2] * inv, acc[mt][dt][half * 2 + 1] * inv);
        }
    __syncwarp();
    constexpr int CH = D / 8;
#pragma unroll
    for (int c = lane; c < MT * 16 * CH; c += 32) {
        const int r = warp * MT * 16 + c / CH, ch = c % CH;
        if (m0 + r < S)
            *reinterpret_cast<uint4*>(o + base + (size_t)(m0 + r) * D + ch * 8) =
                *reinterpret_cast<const uint4*>(sQ + swz<D>(r, ch * 8));
    }
}

extern "C" __global__ void __launch_bounds__(NT)
attention_flash2(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                 bf16* __restrict__ o, int BH, int S, int D, int causal)
{
    if (D == 64)
        attention_body<64>(q, k, v, o, BH, S, causal);
    else if (D == 128)
        attention_body<128>(q, k, v, o, BH, S, causal);
}
