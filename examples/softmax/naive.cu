// softmax_naive: row-wise fp32 softmax, one thread per row, three passes.
//   y[r, c] = exp(x[r, c] - max_c x[r, :]) / sum_c exp(x[r, c] - max_c x[r, :])
//   x and y are rows x cols, row-major, densely packed.
// Launch rule:
//   block = (32, 1, 1)
//   grid  = (ceil_div(rows, 32), 1, 1)
//   shared = 0
// The simplest correct kernel, the starting point: each thread walks its own
// row (max, then sum of exponentials, then the writes), so any rows and cols
// work. Neighbouring threads touch addresses a row apart (uncoalesced), which
// is what makes it slow. One warp per block so that even a few thousand rows
// spread over most multiprocessors. Subtracting the max keeps expf in range;
// expf (not __expf) and a true division keep it accurate.

extern "C" __global__ void softmax_naive(const float* __restrict__ x,
                                         float* __restrict__ y,
                                         int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;

    // size_t: rows * cols can pass 2^31 (4096 x 50257 floats).
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;

    float m = xr[0];
    for (int c = 1; c < cols; ++c) m = fmaxf(m, xr[c]);

    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(xr[c] - m);

    for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) / s;
}
