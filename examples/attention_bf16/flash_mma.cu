// attention_flash_mma: flash-attention-2-style forward on the tensor cores with
// mma.sync (m16n8k16, bf16 in, fp32 accumulate): the first rung below a
// wgmma + TMA kernel. O = softmax(Q K^T / sqrt(D) [causal]) V per head.
//
// Launch rule:
//   block  = (32 * WARPS, 1, 1)
//   grid   = (ceil_div(S, 16 * WARPS), BH, 1)
//   shared = 2 * D * (16 * WARPS + 4 * BN) bytes (dynamic: Q tile, K and V
//            tiles double-buffered; 80 KiB at D = 128 with the defaults)
// D is 64 or 128 (one instantiation each; any other D writes nothing).
//
// Decomposition: a block owns BM = 16 * MT * WARPS query rows of one head (MT = 1,
// below); each warp owns MT m16 tiles of them and keeps their Q fragments in registers for
// the whole key loop. Per tile of BN keys:
//   S = Q K^T            (mma, K fragments by ldmatrix from shared memory)
//   online softmax       (row max over the quad of lanes sharing a row, exp2 with
//                         the 1/sqrt(D) scale folded into log2(e); the running
//                         sum stays per lane until the end; O rescaled)
//   O += P V             (P converted in registers from the S accumulators' layout
//                         to the A-operand layout, rounded to bf16 as flash
//                         attention does; V fragments by ldmatrix.trans)
// K/V tiles are loaded with cp.async (16 bytes, zero-filled past S) one tile
// ahead: the next K while this tile's S and softmax run, the next V while P V
// runs. Shared memory rows are XOR-swizzled in 16-byte chunks by (row % 8), so
// the 8 rows of every ldmatrix hit 8 different bank groups.
//
// Causal: a block visits keys up to its last row only, masks the tiles that
// cross its diagonal, and blocks run last-row-first (the long ones start early).
// Padding: query rows >= S compute on zero rows and are not stored; keys >= S
// are masked to -inf.

#include <cuda_bf16.h>

// knob WARPS: 4 8
#ifndef WARPS
#define WARPS 4
#endif

// MT m16 tiles per warp. Not a knob: at MT = 2 the D = 128 body spills (ptxas,
// sm_90: 255 registers, 200-1628 bytes of spill stores for BN = 32-128).
#ifndef MT
#define MT 1
#endif

// knob BN: 32 64 128
#ifndef BN
#define BN 64
#endif

#define BM (16 * MT * WARPS)
#define NT (32 * WARPS)

#if BN % 16 != 0
#error "BN must be a multiple of 16 (one k step of the P V product)"
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

// rows x D bf16 from global (rows row0.. of a head) into a swizzled tile; past S zero-filled.
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* head, int row0, int S, int tid)
{
    constexpr int CH = D / 8;
#pragma unroll
    for (int c = tid; c < ROWS * CH; c += NT) {
        const int r = c / CH, ch = c % CH;
        const bool valid = row0 + r < S;
        const bf16* src = head + (size_t)(valid ? row0 + r : 0) * D + ch * 8;
        cp_async16(smem_u32(tile + swz<D>(r, ch * 8)), src, valid);
    }
}

template <int D>
__device__ __forceinline__ void attention_body(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                               const bf16* __restrict__ v, bf16* __restrict__ o,
                                               int S, int causal)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
    bf16* sK = sQ + BM * D;
    bf16* sV = sK + 2 * BN * D;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m0 = qb * BM;
    const size_t base = (size_t)blockIdx.y * S * D;
    const int kv_end = causal ? min(S, m0 + BM) : S;
    const int ntiles = (kv_end + BN - 1) / BN;
    const float sl2 = rsqrtf((float)D) * 1.4426950408889634f;  // 1/sqrt(D) * log2(e)
    const float NEG_INF = -__int_as_float(0x7f800000);

    load_tile<D, BM>(sQ, q + base, m0, S, tid);
    load_tile<D, BN>(sK, k + base, 0, S, tid);
    cp_commit();
    load_tile<D, BN>(sV, v + base, 0, S, tid);
    cp_commit();

    u32 qf[MT][D / 16][4];
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
        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < D / 16; ++kk) {
                    const int row = (warp * MT + mt) * 16 + (lane & 15);
                    const int col = kk * 16 + (lane >> 4) * 8;
                    ldsm_x4(smem_u32(sQ + swz<D>(row, col)), qf[mt][kk][0], qf[mt][kk][1], qf[mt][kk][2], qf[mt][kk][3]);
                }
        }
        const bool more = j + 1 < ntiles;
        if (more) {  // K_{j+1} into the buffer K_{j-1} left (everyone is past it: barrier above)
            load_tile<D, BN>(sK + ((j + 1) & 1) * BN * D, k + base, (j + 1) * BN, S, tid);
            cp_commit();
        }

        // S = Q K_j^T
        const bf16* Kt = sK + (j & 1) * BN * D;
        float s[MT][BN / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    s[mt][nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
            for (int nn = 0; nn < BN / 16; ++nn) {
                const int key = nn * 16 + (lane & 7) + ((lane >> 4) << 3);
                const int col = kk * 16 + ((lane >> 3) & 1) * 8;
                u32 b0, b1, b2, b3;
                ldsm_x4(smem_u32(Kt + swz<D>(key, col)), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_bf16(s[mt][2 * nn], qf[mt][kk], b0, b1);
                    mma_bf16(s[mt][2 * nn + 1], qf[mt][kk], b2, b3);
                }
            }

        // Online softmax, in the log2 domain.
        const int n0 = j * BN;
        const bool masked = n0 + BN > S || (causal && n0 + BN - 1 > m0);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = m0 + (warp * MT + mt) * 16 + (lane >> 2) + half * 8;
                float mx = NEG_INF;
#pragma unroll
                for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float x = s[mt][nt][half * 2 + e] * sl2;
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
                const float m_use = m_new == NEG_INF ? 0.0f : m_new;  // a row with nothing unmasked yet
                const float corr = exp2f(m_i[mt][half] - m_use);      // 0 when m_i was -inf
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float p = exp2f(s[mt][nt][half * 2 + e] - m_use);
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

        if (more) cp_wait<1>(); else cp_wait<0>();  // V_j landed
        __syncthreads();
        if (more) {  // V_{j+1} into the buffer V_{j-1} left
            load_tile<D, BN>(sV + ((j + 1) & 1) * BN * D, v + base, (j + 1) * BN, S, tid);
            cp_commit();
        }

        // O += P V_j: the S accumulators of keys 16kk..16kk+15 are the A operand.
        const bf16* Vt = sV + (j & 1) * BN * D;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            u32 a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dd = 0; dd < D / 16; ++dd) {
                const int key = kk * 16 + (lane & 15);
                const int col = dd * 16 + (lane >> 4) * 8;
                u32 b0, b1, b2, b3;
                ldsm_x4_trans(smem_u32(Vt + swz<D>(key, col)), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_bf16(acc[mt][2 * dd], a[mt], b0, b1);
                    mma_bf16(acc[mt][2 * dd + 1], a[mt], b2, b3);
                }
            }
        }
    }

    // O / l, rounded once to bf16; rows past S are not stored.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float l = l_i[mt][half];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            const int row = m0 + (warp * MT + mt) * 16 + (lane >> 2) + half * 8;
            if (row < S) {
                bf16* out = o + base + (size_t)row * D + (lane & 3) * 2;
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt)
                    *reinterpret_cast<__nv_bfloat162*>(out + dt * 8) =
                        __floats2bfloat162_rn(acc[mt][dt][half * 2] * inv, acc[mt][dt][half * 2 + 1] * inv);
            }
        }
}

extern "C" __global__ void __launch_bounds__(NT)
attention_flash_mma(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                    bf16* __restrict__ o, int BH, int S, int D, int causal)
{
    if (D == 64)
        attention_body<64>(q, k, v, o, S, causal);
    else if (D == 128)
        attention_body<128>(q, k, v, o, S, causal);
}
