// transpose_vec4: 64x64-tile transpose that moves float4s on both sides.
//   out[c, r] = x[r, c], x row-major [rows, cols], out row-major [cols, rows].
//   Correct for any rows, cols >= 1.
//
// Why: tiled.cu moves one float per thread per access (LDG.32 / STG.32), 82% of
// the copy floor at 8192^2. Here a half-warp reads 256 contiguous bytes of an x
// row as 16 float4s and writes 256 contiguous bytes of an out row as 16
// float4s: a quarter of the memory instructions, four times the bytes in
// flight per instruction.
//
// Launch rule:
//   block  = (16, ROWS, 1)
//   grid   = (ceil_div(cols, 64), ceil_div(rows, 64), 1)
//   shared = 0   (static: 64 * 64 floats = 16 KiB)
// grid.y is limited to 65535, so rows < 65535 * 64.
//
// Shared-memory layout: the tile is kept as x has it (s[row][col]), in float4
// units of 4 columns, with the unit index XOR-swizzled by (row / 4) % 8:
//   s[row][col] lives at row * 64 + 4 * ((col / 4) ^ ((row / 4) % 8)) + col % 4.
// - Load phase: thread (tx, ty) writes x[r0 + row, c0 + 4tx .. 4tx + 3] as one
//   float4 into unit tx ^ swz(row). STS.128 is served 8 lanes at a time; the 8
//   lanes of one row hit 8 different units mod 8: conflict-free.
// - Store phase: thread (tx, ty) builds out[c0 + cc, r0 + 4tx .. 4tx + 3] from
//   s[4tx + q][cc], q = 0..3 (four LDS.32), then writes one float4. Rows 4tx + q
//   differ across lanes but their unit is (cc / 4) ^ (tx % 8): lanes tx and
//   tx + 8 share a bank, a 2-way conflict (16 lanes cannot spread over 8 units).
// - Without the swizzle the load phase is conflict-free and the store phase is
//   16-way (every row of the column in one bank).
//
// Paths (uniform per block, no divergence): a whole tile of an aligned problem
// (cols % 4 == 0, rows % 4 == 0, so every row of x and of out starts 16-byte
// aligned given 16-byte aligned buffers) moves float4s; edge tiles and unaligned
// problems move the same slots element by element with bounds checks. Slots
// outside the matrix are never written to shared memory and never read back.

// knob ROWS: 4 8 16
#ifndef ROWS
#define ROWS 8
#endif

#define T64 64

static_assert(T64 % ROWS == 0, "ROWS must divide 64");

__device__ __forceinline__ int swz(int row, int col)
{
    return row * T64 + (((col >> 2) ^ ((row >> 2) & 7)) << 2) + (col & 3);
}

extern "C" __global__ void __launch_bounds__(16 * ROWS)
transpose_vec4(const float* __restrict__ x,
               float* __restrict__ out,
               int rows, int cols)
{
    __shared__ __align__(16) float s[T64 * T64];

    const int tx = threadIdx.x;              // 0..15: a float4 unit
    const int ty = threadIdx.y;
    const int c0 = blockIdx.x * T64;         // first x column of the tile
    const int r0 = blockIdx.y * T64;         // first x row of the tile
    const bool aligned = (cols & 3) == 0 && (rows & 3) == 0
                      && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(out)) & 15) == 0;
    const bool whole = aligned && r0 + T64 <= rows && c0 + T64 <= cols;

    if (whole) {
#pragma unroll
        for (int row = ty; row < T64; row += ROWS) {
            const float4 v = __ldcs(reinterpret_cast<const float4*>(x + (size_t)(r0 + row) * cols + c0) + tx);
            *reinterpret_cast<float4*>(&s[swz(row, 4 * tx)]) = v;
        }
    } else {
#pragma unroll
        for (int row = ty; row < T64; row += ROWS) {
            const int r = r0 + row;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int c = c0 + 4 * tx + q;
                if (r < rows && c < cols)
                    s[swz(row, 4 * tx + q)] = x[(size_t)r * cols + c];
            }
        }
    }

    // Every thread reaches the barrier: no early return above.
    __syncthreads();

    if (whole) {
#pragma unroll
        for (int cc = ty; cc < T64; cc += ROWS) {
            float4 v;
            v.x = s[swz(4 * tx + 0, cc)];
            v.y = s[swz(4 * tx + 1, cc)];
            v.z = s[swz(4 * tx + 2, cc)];
            v.w = s[swz(4 * tx + 3, cc)];
            __stcs(reinterpret_cast<float4*>(out + (size_t)(c0 + cc) * rows + r0) + tx, v);
        }
    } else {
#pragma unroll
        for (int cc = ty; cc < T64; cc += ROWS) {
            const int oc = c0 + cc;              // out row == x column
            if (oc >= cols) continue;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int r = r0 + 4 * tx + q;   // out column == x row
                if (r < rows)
                    out[(size_t)oc * rows + r] = s[swz(4 * tx + q, cc)];
            }
        }
    }
}
