// transpose_tiled: shared-memory tiled transpose, coalesced on both sides.
//   out[c, r] = x[r, c], x row-major [rows, cols], out row-major [cols, rows].
//   Correct for any rows, cols >= 1 (every global access is bounds-checked).
//
// A block moves one TILE x TILE tile: it reads TILE rows of x along their
// length (consecutive threadIdx.x -> consecutive addresses), parks them in
// shared memory, then writes TILE rows of out, again along their length, by
// reading the tile column-wise. Only shared memory sees the strided pattern,
// and the +1 padding of each tile row makes a column's 32 words fall in 32
// different banks (row stride TILE + 1 is odd), so neither phase conflicts.
// The block is TILE x ROWS threads; each thread moves TILE / ROWS elements per
// phase, so several independent loads per thread are in flight at once.
//
// Launch rule:
//   block  = (TILE, ROWS, 1)
//   grid   = (ceil_div(cols, TILE), ceil_div(rows, TILE), 1)
//   shared = 0   (static: TILE * (TILE + 1) floats)
// grid.y is limited to 65535, so rows < 65535 * TILE (~2M at TILE = 32).

// knob TILE: 32 64
#ifndef TILE
#define TILE 32
#endif

// knob ROWS: 4 8 16
#ifndef ROWS
#define ROWS 8
#endif

static_assert(TILE % 32 == 0, "TILE must be a multiple of the warp size (whole-warp rows)");
static_assert(TILE % ROWS == 0, "ROWS must divide TILE");
static_assert(TILE * ROWS <= 1024, "block TILE x ROWS must have at most 1024 threads");
static_assert(TILE * (TILE + 1) * sizeof(float) <= 48 * 1024, "static shared memory within 48 KiB");

extern "C" __global__ void __launch_bounds__(TILE * ROWS)
transpose_tiled(const float* __restrict__ x,
                float* __restrict__ out,
                int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int c0 = blockIdx.x * TILE;            // first x column of the tile
    const int r0 = blockIdx.y * TILE;            // first x row of the tile

    // Phase 1: x[r0 + i, c0 + tx] -> tile[i][tx] (a row of x along threadIdx.x).
    const int c = c0 + tx;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {   // constant trip count: unrolls fully
        const int i = ty + j;
        const int r = r0 + i;
        if (r < rows && c < cols)
            tile[i][tx] = x[(size_t)r * cols + c];
    }

    // Every thread reaches the barrier: no early return above.
    __syncthreads();

    // Phase 2: tile[tx][i] -> out[c0 + i, r0 + tx] (a row of out along
    // threadIdx.x). Entries of the tile outside the matrix were never written
    // and are never read: the same bounds guard both phases.
    const int r = r0 + tx;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        const int i  = ty + j;
        const int oc = c0 + i;                   // out row == x column
        if (oc < cols && r < rows)
            out[(size_t)oc * rows + r] = tile[tx][i];
    }
}
