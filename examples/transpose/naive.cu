// transpose_naive: the simple start, one thread per element.
//   out[c, r] = x[r, c], x row-major [rows, cols], out row-major [cols, rows].
// Launch rule:
//   block = (32, 8, 1)
//   grid  = (ceil_div(cols, 32), ceil_div(rows, 8), 1)
//   shared = 0
// threadIdx.x walks cols so a warp's reads are one contiguous 128-byte row
// segment (coalesced); its writes then land rows floats apart (one sector per
// thread), which is what the tiled kernel fixes. Threads outside the matrix do
// nothing, so any rows, cols work (rows / 8 must fit grid.y: rows < 524288).

extern "C" __global__ void transpose_naive(const float* __restrict__ x,
                                           float* __restrict__ out,
                                           int rows, int cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= rows || c >= cols) return;
    out[(size_t)c * rows + r] = x[(size_t)r * cols + c];
}
