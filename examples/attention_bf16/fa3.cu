// attention_fa3: a FlashAttention-3-class forward for Hopper (sm_90a). wgmma
// (m64nNk16, bf16 in, fp32 accumulate) computes S = Q K^T and O += P V; TMA copies
// Q, K and V into 128-byte swizzled shared tiles; the block is warp-specialised.
// O = softmax(Q K^T / sqrt(D) [causal]) V per head.
//
// Launch rule (a program step: the first three arguments are TMA descriptors the
// runner encodes, of q, k and v seen as (BH * S) x D row-major arrays):
//   block  = (384, 1, 1): warpgroup 0 produces, warpgroups 1 and 2 consume
//   grid   = (ceil_div(S, 128) * BH, 1, 1): one block per 128 query rows of a head
//   shared = 2 * D * (128 + 2 * STAGES * BN) + 1024 bytes (dynamic: the Q tile and
//            STAGES K and V tiles, 1 KiB of slack to align them to 1024 bytes;
//            161 KiB at D = 128 with the defaults)
// D is 64 or 128 (one instantiation each; any other D writes nothing). The flat row
// index head * S + row must stay below 2^31 (TMA coordinates are 32-bit).
//
// Producer (warpgroup 0, setmaxnreg.dec to 24 registers; one thread issues every
// copy): Q once, then for each key block K and V into a STAGES-deep ring, each stage
// with a full mbarrier (expect_tx, completed by the copy engine) and an empty one
// (one arrival per consumer warp once the wgmma that read it has retired).
// Consumers (warpgroups 1 and 2, setmaxnreg.inc to 240): each owns 64 of the 128
// query rows and runs the whole key loop over the K and V tiles both share:
//   S = Q K^T   wgmma m64nBNk16, Q and K both K-major from the swizzled tiles
//   softmax     online, in registers: the accumulator layout gives each thread
//               rows 16 * warp + lane / 4 (+ 8) and columns 8 j + 2 (lane % 4) + {0, 1};
//               row max over the quad of lanes sharing a row, p = ex2(s * c - m * c)
//               with c = log2(e) / sqrt(D) in one FFMA (the running max is always
//               subtracted: the large-input case has logits of a few hundred)
//   O += P V    wgmma m64nDk16 with A from registers: the S accumulators of keys
//               16 kk .. 16 kk + 15 are, packed in bf16 pairs, exactly the A fragment
//               of k step kk (no shuffle); V N-major (transpose-B) from its row-major tile
// OVERLAP = 1 (FA3's intra-warpgroup overlap): block n's QK^T is issued, then the
// previous block's PV, and block n's softmax runs while the PV is in flight; O is
// rescaled by the previous softmax's correction before that PV is issued.
// PINGPONG = 1 (FA3's inter-warpgroup schedule): named barriers let the two
// consumers issue their wgmmas in turn, so one's softmax runs under the other's MMAs.
//
// Causal: a block loads and visits keys up to its last row only (tiles above the
// diagonal are never touched), masks only the tiles that cross its first row's
// diagonal, and blocks run last-rows-first (the long ones start early). Keys are
// visited in ascending order, so every row's first tile holds key 0 and its running
// max is finite from then on. Ragged S: a tile past the head's end reads the next
// head's rows (zeros past the array's end: TMA zero-fills); keys >= S are masked to
// -inf, so those rows get p = 0, and query rows >= S are computed but not stored.
// Epilogue: O / l rounded once to bf16, stored as bf16 pairs straight from the
// accumulators, rows >= S skipped, 64-bit offsets.
// Conventions as in examples/bf16_gemm/wgmma_tma.cu and wgmma_ws.cu: descriptor fields,
// 64-column boxes per 128-byte swizzle atom, one tile's boxes contiguous.
#include <cuda_bf16.h>

// Keys per block: the S tile is 64 x BN per consumer warpgroup. (FA3 takes 176 for
// non-causal D = 128; here S, O and P of 176 keys spill at 240 registers.)
// knob BN: 128 64
#ifndef BN
#define BN 128
#endif
// knob STAGES: 2 3
#ifndef STAGES
#define STAGES 2
#endif
// knob OVERLAP: 1 0
#ifndef OVERLAP
#define OVERLAP 1
#endif
// knob PINGPONG: 1 0
#ifndef PINGPONG
#define PINGPONG 1
#endif

#define BM 128                // query rows per block: 64 per consumer warpgroup
#define THREADS 384
#define CONSUMER_WARPS 8      // the arrivals that empty a stage
#define PRODUCER_REGS 24
#define CONSUMER_REGS 240     // 128 x 24 + 256 x 240 <= 65536

static_assert(BN == 64 || BN == 128, "BN is 64 or 128");
static_assert(STAGES >= 2, "at least two stages");

typedef unsigned int u32;
typedef unsigned long long u64;
typedef __nv_bfloat16 bf16;

struct alignas(64) CUtensorMap { u64 opaque[16]; };

__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], u64 da, u64 db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], u64 da, u64 db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], u32 a0, u32 a1, u32 a2, u32 a3, u64 db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}

__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], u32 a0, u32 a1, u32 a2, u32 a3, u64 db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}

template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 da, u64 db, int accumulate)
{
    if constexpr (N == 64)
        wgmma_ss_n64(d, da, db, accumulate);
    else
        wgmma_ss_n128(d, da, db, accumulate);
}

template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], u32 a0, u32 a1, u32 a2, u32 a3, u64 db)
{
    if constexpr (N == 64)
        wgmma_rs_n64(d, a0, a1, a2, a3, db);
    else
        wgmma_rs_n128(d, a0, a1, a2, a3, db);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// The compiler sees a wgmma's accumulators as written when the asm statement issues;
// these empty statements pin every read and write of them between the fences and
// waits, where the asynchronous hardware allows them.
template <int N>
__device__ __forceinline__ void hold(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void hold(u32 (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+r"(r[i])::"memory");
}

__device__ __forceinline__ u32 smem_addr(const void* p)
{
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// A wgmma shared-memory descriptor, 128-byte swizzle: start, leading and stride byte
// offsets in 16-byte units. K-major (Q, K): stride 1024 B between 8-row groups, leading
// unused. N-major (V): leading = one box between 64-column atoms, stride 1024 B
// between groups of 8 key rows.
__device__ __forceinline__ u64 descriptor(u32 addr, u32 leading, u32 stride)
{
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(leading >> 4) << 16) | ((u64)(stride >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void tma_load(u32 dst, const CUtensorMap* map, int x, int y, u32 bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void expect_bytes(u32 bar, u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void wait_phase(u32 bar, u32 parity)
{
    u32 done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

// One arrival per consumer warp on an empty barrier, after the warp's own wait_group
// has retired the wgmma that read the stage.
__device__ __forceinline__ void release(u32 bar)
{
    if (threadIdx.x % 32 == 0)
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// The two consumers' turns (PINGPONG): barrier 1 + c is consumer c's. A turn is the
// issue of one batch of wgmmas: sync on one's own barrier before, arrive on the
// other's after. Consumer 1 arrives once up front (consumer 0 goes first) and skips its
// arrival after its last turn, so every sync meets exactly one arrival of the other
// (both consumers take the same number of turns: they visit the same key blocks).
__device__ __forceinline__ void turn_begin(int c)
{
#if PINGPONG
    asm volatile("bar.sync %0, 256;\n" ::"r"(1 + c) : "memory");
#endif
}
__device__ __forceinline__ void turn_end(int c, bool last)
{
#if PINGPONG
    if (c == 0 || !last)
        asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - c) : "memory");
#endif
}

// 2^x on the special function unit; ex2(-inf) = +0.
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

// Shared-memory layout in bytes from the 1024-aligned base: the Q tile, then STAGES K
// tiles, then STAGES V tiles. A tile is D / 64 boxes of ROWS x 64 columns (128 bytes a
// row, swizzled by TMA), box b holding columns 64 b .. 64 b + 63.
#define Q_BOX (BM * 128)
#define KV_BOX (BN * 128)
#define Q_BYTES(D) (BM * (D) * 2)
#define KV_BYTES(D) (BN * (D) * 2)

// mbarriers: [0] Q full, then per stage K full, V full, K empty, V empty.
#define Q_FULL(b) smem_addr(&(b)[0])
#define K_FULL(b, s) smem_addr(&(b)[1 + (s)])
#define V_FULL(b, s) smem_addr(&(b)[1 + STAGES + (s)])
#define K_EMPTY(b, s) smem_addr(&(b)[1 + 2 * STAGES + (s)])
#define V_EMPTY(b, s) smem_addr(&(b)[1 + 3 * STAGES + (s)])

template <int D>
__device__ __forceinline__ void produce(const CUtensorMap* q_map, const CUtensorMap* k_map, const CUtensorMap* v_map,
                                        u64* bars, u32 base, int row0, int m0, int nblocks)
{
    const u32 k_tiles = base + Q_BYTES(D), v_tiles = k_tiles + STAGES * KV_BYTES(D);
    expect_bytes(Q_FULL(bars), Q_BYTES(D));
#pragma unroll
    for (int b = 0; b < D / 64; ++b)
        tma_load(base + b * Q_BOX, q_map, b * 64, row0 + m0, Q_FULL(bars));  // (column, row)
    for (int n = 0; n < nblocks; ++n) {
        const int s = n % STAGES;
        const u32 parity = ((n / STAGES) & 1) ^ 1;  // the previous use of this stage has been released
        if (n >= STAGES)
            wait_phase(K_EMPTY(bars, s), parity);
        expect_bytes(K_FULL(bars, s), KV_BYTES(D));
#pragma unroll
        for (int b = 0; b < D / 64; ++b)
            tma_load(k_tiles + s * KV_BYTES(D) + b * KV_BOX, k_map, b * 64, row0 + n * BN, K_FULL(bars, s));
        if (n >= STAGES)
            wait_phase(V_EMPTY(bars, s), parity);
        expect_bytes(V_FULL(bars, s), KV_BYTES(D));
#pragma unroll
        for (int b = 0; b < D / 64; ++b)
            tma_load(v_tiles + s * KV_BYTES(D) + b * KV_BOX, v_map, b * 64, row0 + n * BN, V_FULL(bars, s));
    }
}

// S = Q K^T for this consumer's 64 rows: D / 16 k steps; k step kk is 32 bytes into
// the rows of box kk / 4 (both operands K-major).
template <int D>
__device__ __forceinline__ void issue_qk(float (&s)[BN / 2], u32 q_rows, u32 k_tile)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u64 da = descriptor(q_rows + (kk / 4) * Q_BOX + (kk % 4) * 32, 16, 1024);
        const u64 db = descriptor(k_tile + (kk / 4) * KV_BOX + (kk % 4) * 32, 16, 1024);
        wgmma_ss<BN>(s, da, db, kk > 0);
    }
}

// O += P V: BN / 16 k steps of 16 keys; the next 16 key rows of V are two 8-row groups
// (2048 bytes) further; the 64-column atoms along D are one box apart.
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const u32 (&p)[BN / 4], u32 v_tile)
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
        wgmma_rs<D>(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                    descriptor(v_tile + kk * 2048, KV_BOX, 1024));
}

// Online softmax of key block n in place: s becomes p = 2^(s c - m c) (fp32), the
// running max m and sum l move on, corr is the factor O must be scaled by before this
// block's P V is added. Element 4 j + 2 h + e is row rows[h], key n BN + 8 j + 2 (lane % 4) + e.
__device__ __forceinline__ void softmax(float (&s)[BN / 2], int n, const int (&rows)[2], int first_row, int S,
                                        int causal, float sl2, float (&m)[2], float (&l)[2], float (&corr)[2])
{
    const float NEG_INF = -__int_as_float(0x7f800000);
    const int k0 = n * BN, lane = threadIdx.x % 32;
    // Only the tiles crossing S or the diagonal of this warpgroup's first row need a mask.
    const bool masked = k0 + BN > S || (causal && k0 + BN - 1 > first_row);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = NEG_INF;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float x = s[4 * j + 2 * h + e];
                if (masked) {
                    const int key = k0 + 8 * j + 2 * (lane % 4) + e;
                    if (key >= S || (causal && key > rows[h]))
                        x = NEG_INF;
                }
                s[4 * j + 2 * h + e] = x;
                mx = fmaxf(mx, x);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[h], mx);
        const float ms = m_new == NEG_INF ? 0.0f : m_new * sl2;  // a row with nothing unmasked yet
        corr[h] = ex2(m[h] * sl2 - ms);                          // 0 while m was -inf
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float p = ex2(fmaf(s[4 * j + 2 * h + e], sl2, -ms));
                s[4 * j + 2 * h + e] = p;
                sum += p;
            }
        l[h] = l[h] * corr[h] + sum;
        m[h] = m_new;
    }
}

// P rounded to bf16, packed in the A-fragment order of the P V wgmma: register i holds
// accumulators 2 i and 2 i + 1 (k step kk reads registers 4 kk .. 4 kk + 3).
__device__ __forceinline__ void to_bf16(const float (&s)[BN / 2], u32 (&p)[BN / 4])
{
#pragma unroll
    for (int i = 0; i < BN / 4; ++i)
        p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&corr)[2])
{
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            o[4 * j + 2 * h] *= corr[h];
            o[4 * j + 2 * h + 1] *= corr[h];
        }
}

template <int D>
__device__ __forceinline__ void consume(int c, u64* bars, u32 base, bf16* __restrict__ out, int S, int causal,
                                        int head, int m0, int nblocks)
{
    const u32 k_tiles = base + Q_BYTES(D), v_tiles = k_tiles + STAGES * KV_BYTES(D);
    const u32 q_rows = base + c * 64 * 128;  // this consumer's 64 rows in every Q box
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int first_row = m0 + c * 64;
    const int rows[2] = {first_row + 16 * warp + lane / 4, first_row + 16 * warp + lane / 4 + 8};
    const float sl2 = rsqrtf((float)D) * 1.4426950408889634f;  // 1/sqrt(D) * log2(e)
    const float NEG_INF = -__int_as_float(0x7f800000);

    float s[BN / 2], o[D / 2];
    u32 p[BN / 4];
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f}, corr[2] = {1.0f, 1.0f};
#pragma unroll
    for (int i = 0; i < BN / 2; ++i)
        s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 2; ++i)
        o[i] = 0.0f;
#if PINGPONG
    if (c == 1)  // consumer 0 takes the first turn
        asm volatile("bar.arrive 1, 256;\n" ::: "memory");
#endif
    wait_phase(Q_FULL(bars), 0);

#if OVERLAP
    // Block 0: its S and softmax alone.
    wait_phase(K_FULL(bars, 0), 0);
    turn_begin(c);
    hold(s);
    wgmma_fence();
    issue_qk<D>(s, q_rows, k_tiles);
    wgmma_commit();
    turn_end(c, false);
    wgmma_wait<0>();
    hold(s);
    release(K_EMPTY(bars, 0));
    softmax(s, 0, rows, first_row, S, causal, sl2, m, l, corr);
    to_bf16(s, p);
    for (int n = 1; n < nblocks; ++n) {
        const int ks = n % STAGES, vs = (n - 1) % STAGES;
        wait_phase(K_FULL(bars, ks), (n / STAGES) & 1);
        turn_begin(c);
        hold(s);
        wgmma_fence();
        issue_qk<D>(s, q_rows, k_tiles + ks * KV_BYTES(D));
        wgmma_commit();
        // O is not in flight here: the last P V retired at the end of the previous block.
        rescale<D>(o, corr);
        wait_phase(V_FULL(bars, vs), ((n - 1) / STAGES) & 1);
        hold(o);
        hold(p);
        wgmma_fence();
        issue_pv<D>(o, p, v_tiles + vs * KV_BYTES(D));
        wgmma_commit();
        turn_end(c, false);
        wgmma_wait<1>();  // S of block n has landed; P V of block n - 1 may still run
        hold(s);
        release(K_EMPTY(bars, ks));
        softmax(s, n, rows, first_row, S, causal, sl2, m, l, corr);
        wgmma_wait<0>();
        hold(o);
        hold(p);
        release(V_EMPTY(bars, vs));
        to_bf16(s, p);
    }
    // The last block's P V.
    {
        const int vs = (nblocks - 1) % STAGES;
        rescale<D>(o, corr);
        wait_phase(V_FULL(bars, vs), ((nblocks - 1) / STAGES) & 1);
        turn_begin(c);
        hold(o);
        hold(p);
        wgmma_fence();
        issue_pv<D>(o, p, v_tiles + vs * KV_BYTES(D));
        wgmma_commit();
        turn_end(c, true);
        wgmma_wait<0>();
        hold(o);
        release(V_EMPTY(bars, vs));
    }
#else
    // One block at a time: S, softmax, P V, each waited for.
    for (int n = 0; n < nblocks; ++n) {
        const int st = n % STAGES;
        const u32 parity = (n / STAGES) & 1;
        wait_phase(K_FULL(bars, st), parity);
        turn_begin(c);
        hold(s);
        wgmma_fence();
        issue_qk<D>(s, q_rows, k_tiles + st * KV_BYTES(D));
        wgmma_commit();
        turn_end(c, n == nblocks - 1);
        wgmma_wait<0>();
        hold(s);
        release(K_EMPTY(bars, st));
        softmax(s, n, rows, first_row, S, causal, sl2, m, l, corr);
        rescale<D>(o, corr);
        to_bf16(s, p);
        wait_phase(V_FULL(bars, st), parity);
        hold(o);
        hold(p);
        wgmma_fence();
        issue_pv<D>(o, p, v_tiles + st * KV_BYTES(D));
        wgmma_commit();
        wgmma_wait<0>();
        hold(o);
        release(V_EMPTY(bars, st));
    }
#endif

    // O / l, rounded once to bf16; query rows >= S are not stored.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = l[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        if (rows[h] < S) {
            bf16* dst = out + ((long long)head * S + rows[h]) * D + 2 * (lane % 4);
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                *reinterpret_cast<__nv_bfloat162*>(dst + 8 * j) =
                    __floats2bfloat162_rn(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
        }
    }
}

template <int D>
__device__ __forceinline__ void attention_body(const CUtensorMap* q_map, const CUtensorMap* k_map,
                                               const CUtensorMap* v_map, bf16* __restrict__ out, int BH, int S,
                                               int causal, u64* bars)
{
    extern __shared__ unsigned char smem_raw[];
    // 128-byte swizzled tiles start on a 1024-byte boundary (the launch adds 1 KiB of slack).
    const u32 base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const int nqb = (S + BM - 1) / BM;
    const int head = blockIdx.x % BH, qi = blockIdx.x / BH;
    const int m0 = (causal ? nqb - 1 - qi : qi) * BM;
    const int kv_end = causal ? min(S, m0 + BM) : S;
    const int nblocks = (kv_end + BN - 1) / BN;

    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(Q_FULL(bars)));
        for (int s = 0; s < STAGES; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(K_FULL(bars, s)));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(V_FULL(bars, s)));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(K_EMPTY(bars, s)), "r"(CONSUMER_WARPS));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(V_EMPTY(bars, s)), "r"(CONSUMER_WARPS));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (threadIdx.x == 0)
            produce<D>(q_map, k_map, v_map, bars, base, head * S, m0, nblocks);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        consume<D>(wg - 1, bars, base, out, S, causal, head, m0, nblocks);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
attention_fa3(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
              const __grid_constant__ CUtensorMap v_map, bf16* __restrict__ o, int BH, int S, int D, int causal)
{
    __shared__ alignas(8) u64 bars[1 + 4 * STAGES];
    if (D == 64)
        attention_body<64>(&q_map, &k_map, &v_map, o, BH, S, causal, bars);
    else if (D == 128)
        attention_body<128>(&q_map, &k_map, &v_map, o, BH, S, causal, bars);
}
