// transpose_pipe: TILE x TILE-tile transpose, float4s on both sides (vec4.cu's tile and
// swizzle at TILE = 64), a fixed grid of blocks that each walk many tiles with the next tile's
// loads in flight while the current tile is written.
//   out[c, r] = x[r, c], x row-major [rows, cols], out row-major [cols, rows].
//   Correct for any rows, cols >= 1.
//
// Launch rule:
//   block  = (TILE / 4, ROWS, 1)
//   grid   = (min(GRID, ceil_div(cols, TILE) * ceil_div(rows, TILE)), 1, 1)
//   shared = 8 * TILE * TILE   (dynamic: two TILE x TILE float tiles, 32 KiB at TILE = 64)
// Block b does tiles b, b + gridDim.x, b + 2 gridDim.x, ... Tile t is x's tile
// (tr, tc) = (t / ntc, t % ntc) with ORDER = 0 (the blocks running at once cover
// a band of x rows: x read in long runs), (t % ntr, t / ntr) with ORDER = 1 (a band
// of x columns: out written in long runs).
//
// Why: vec4.cu (85% of the floor) gives one tile to a block: four float4 loads per
// thread, a barrier, four stores, exit, so each block's load and store phases
// alternate and 16384 short blocks come and go. Here a block loads tile k + 1 into
// registers right after tile k is in shared memory, so its loads are in flight
// while it writes tile k, and GRID blocks (at TILE = 64, 6 per SM fit: 32 KiB of shared
// memory each; 792 = 6 x 132 SMs on an H200) stay resident for the whole transpose. At
// TILE = 128 one block fits per SM: a GRID above 132 is not resident, extra blocks wait.
//
// Per tile, thread (tx, ty) holds x[r0 + ty + j ROWS, c0 + 4 tx .. 4 tx + 3] in
// v[j], j < TILE / ROWS; it writes them to shared memory as float4s, then builds
// out[c0 + cc, r0 + 4 tx .. 4 tx + 3] for cc = ty + j ROWS from four LDS.32 and writes
// one float4. Shared memory is swizzled by float4 slot, vec4.cu's slot (col / 4) XOR
// ((row / 4) mod 8): the float4 writes are conflict-free; the scalar reads down a column
// are 2-way conflicted at TILE = 64 and 4-way at TILE = 128 when a warp reads one column
// (SMAP = 0), conflict-free when it reads 4 columns x 8 float4s (SMAP = 1, store_unit).
// Shared memory is double-buffered by tile parity: one barrier per tile (a thread
// writes buffer k & 1 for tile k only after the barrier of tile k - 1, which every
// thread reaches after its reads of tile k - 2, the same buffer).
// A whole tile of an aligned problem (cols % 4 == 0, rows % 4 == 0, 16-byte
// aligned buffers) moves float4s; other tiles load and store element by element
// with bounds checks (slots outside the matrix are loaded as 0, never stored).
//
// TILE = 128 (unmeasured): runs of 512 bytes on both sides instead
// of 256, fewer DRAM row switches per byte; 128 KiB of shared memory, one block per SM.

// Defaults measured best in a knob sweep on the H200: ROWS=16 MINB=4 ran 8192x8192 and
// 4096x16384 in 0.1505 / 0.1502 ms (ROWS=8 MINB=6: 0.1546 / 0.1546).

// knob ROWS: 4 8 16
#ifndef ROWS
#define ROWS 16
#endif

// knob GRID: 132 264 396 528 660 792 1056 1584 100000
#ifndef GRID
#define GRID 792
#endif

// knob ORDER: 0 1
#ifndef ORDER
#define ORDER 0
#endif

// which thread builds which float4 of out (store_unit)
// knob SMAP: 0 1
#ifndef SMAP
#define SMAP 0
#endif

// tile side, in floats
// knob TILE: 64 128 32
#ifndef TILE
#define TILE 64
#endif

// Blocks per SM that ptxas must fit: at TILE = 64 shared memory allows 6 (33 KiB each with
// the runtime's reserve, of 228); unbounded, ptxas took 96 registers at ROWS = 8, which
// fits only 5. At TILE = 128 one fits.
// knob MINB: 4 5 6 1 2
#ifndef MINB
#define MINB 4
#endif

#if MINB * (8 * TILE * TILE + 1024) > 233472
#error "MINB blocks of this tile's shared memory do not fit an SM (228 KiB)"
#endif

// The evict-first hint (__ldcs / __stcs: nothing is read twice) on x's float4 loads and
// out's float4 stores (1, as measured so far), on neither (0), on the loads only (2) or on
// the stores only (3): which one helps is unmeasured (torch.compile runs these cases at
// 90-92% of the floor on the H200, pipe at 86-90%). Listed so that the tuner's neighbours
// of 1 are the two single-hint variants.
// knob HINT: 0 2 1 3
#ifndef HINT
#define HINT 1
#endif

__device__ __forceinline__ float4 load4(const float4* p)
{
#if HINT == 1 || HINT == 2
    return __ldcs(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ void store4(float4* p, const float4& v)
{
#if HINT == 1 || HINT == 3
    __stcs(p, v);
#else
    *p = v;
#endif
}

#define NJ (TILE / ROWS)

static_assert(TILE == 32 || TILE == 64 || TILE == 128, "TILE must be 32, 64 or 128");
static_assert(TILE % ROWS == 0, "ROWS must divide TILE");
static_assert(TILE / 4 * ROWS % 32 == 0, "a block must be whole warps (SMAP's groups)");

__device__ __forceinline__ int swz(int row, int col)
{
    return row * TILE + (((col >> 2) ^ ((row >> 2) & 7)) << 2) + (col & 3);
}

struct Tile {
    int r0, c0;
    bool whole;
};

__device__ __forceinline__ Tile tile_at(int t, int rows, int cols, bool aligned)
{
    const int ntc = (cols + TILE - 1) / TILE;
    const int ntr = (rows + TILE - 1) / TILE;
    Tile k;
#if ORDER == 0
    k.r0 = (t / ntc) * TILE;
    k.c0 = (t % ntc) * TILE;
#else
    k.r0 = (t % ntr) * TILE;
    k.c0 = (t / ntr) * TILE;
#endif
    k.whole = aligned && k.r0 + TILE <= rows && k.c0 + TILE <= cols;
    return k;
}

__device__ __forceinline__ void load_tile(float4 (&v)[NJ], const float* __restrict__ x, const Tile& k,
                                          int rows, int cols)
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    if (k.whole) {
#pragma unroll
        for (int j = 0; j < NJ; ++j)
            v[j] = load4(reinterpret_cast<const float4*>(x + (size_t)(k.r0 + ty + j * ROWS) * cols + k.c0) + tx);
    } else {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const int r = k.r0 + ty + j * ROWS;
            const int c = k.c0 + 4 * tx;
            const float* p = x + (size_t)r * cols + c;
            const bool in = r < rows;
            v[j].x = in && c + 0 < cols ? p[0] : 0.0f;
            v[j].y = in && c + 1 < cols ? p[1] : 0.0f;
            v[j].z = in && c + 2 < cols ? p[2] : 0.0f;
            v[j].w = in && c + 3 < cols ? p[3] : 0.0f;
        }
    }
}

// The float4 of out a thread builds in its j-th store: out row c0 + cc, x rows r0 + 4 txo
// .. 4 txo + 3. SMAP = 0: (txo, cc) = (tx, ty + j ROWS), a warp reading one or two columns
// of the tile (the 2- or 4-way conflicts above). SMAP = 1: a warp takes 4 consecutive
// columns x 8 consecutive float4s, so its 32 scalar reads hit 32 distinct banks under the
// same swizzle, and its stores are 4 runs of 128 bytes.
__device__ __forceinline__ void store_unit(int j, int& txo, int& cc)
{
#if SMAP
    const int l = threadIdx.y * (TILE / 4) + threadIdx.x;
    const int g = (l >> 5) + j * (TILE / 4 * ROWS / 32);  // this warp's j-th group of 4 x 8
    cc = 4 * (g / (TILE / 32)) + ((l & 31) >> 3);
    txo = 8 * (g % (TILE / 32)) + (l & 7);
#else
    txo = threadIdx.x;
    cc = threadIdx.y + j * ROWS;
#endif
}

__device__ __forceinline__ void store_tile(float* __restrict__ out, const float* s, const Tile& k,
                                           int rows, int cols)
{
    if (k.whole) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            int tx, cc;
            store_unit(j, tx, cc);
            float4 v;
            v.x = s[swz(4 * tx + 0, cc)];
            v.y = s[swz(4 * tx + 1, cc)];
            v.z = s[swz(4 * tx + 2, cc)];
            v.w = s[swz(4 * tx + 3, cc)];
            store4(reinterpret_cast<float4*>(out + (size_t)(k.c0 + cc) * rows + k.r0) + tx, v);
        }
    } else {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            int tx, cc;
            store_unit(j, tx, cc);
            const int oc = k.c0 + cc;             // out row == x column
            if (oc >= cols) continue;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int r = k.r0 + 4 * tx + q;  // out column == x row
                if (r < rows)
                    out[(size_t)oc * rows + r] = s[swz(4 * tx + q, cc)];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(TILE / 4 * ROWS, MINB)
transpose_pipe(const float* __restrict__ x, float* __restrict__ out, int rows, int cols)
{
    extern __shared__ __align__(16) float s[];  // two TILE x TILE tiles

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int ntiles = ((cols + TILE - 1) / TILE) * ((rows + TILE - 1) / TILE);
    const bool aligned = (cols & 3) == 0 && (rows & 3) == 0
                      && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(out)) & 15) == 0;

    float4 v[NJ];
    int t = blockIdx.x;  // uniform per block: every thread runs the same iterations
    Tile k = tile_at(t, rows, cols, aligned);
    if (t < ntiles) load_tile(v, x, k, rows, cols);
    for (int it = 0; t < ntiles; ++it) {
        float* sb = s + (it & 1) * (TILE * TILE);
#pragma unroll
        for (int j = 0; j < NJ; ++j)
            *reinterpret_cast<float4*>(&sb[swz(ty + j * ROWS, 4 * tx)]) = v[j];
        __syncthreads();
        const int tn = t + gridDim.x;
        const Tile kn = tile_at(tn, rows, cols, aligned);
        if (tn < ntiles) load_tile(v, x, kn, rows, cols);  // in flight while tile t is written
        store_tile(out, sb, k, rows, cols);
        t = tn;
        k = kn;
    }
}
