// layernorm_naive: row-wise fp32 layer norm, one thread per row, three passes.
//   mean = sum_c x[r, c] / cols,  var = sum_c (x[r, c] - mean)^2 / cols
//   y[r, c] = (x[r, c] - mean) / sqrt(var + 1e-5) * weight[c] + bias[c]
//   x and y are rows x cols, row-major, densely packed; weight, bias have cols.
// Launch rule:
//   block = (32, 1, 1)
//   grid  = (ceil_div(rows, 32), 1, 1)
//   shared = 0
// The simplest correct kernel, the starting point: each thread walks its own
// row (mean, then variance, then the writes), so any rows and cols work.
// Neighbouring threads touch addresses a row apart (uncoalesced), which is what
// makes it slow. One warp per block so that even a few thousand rows spread
// over most multiprocessors. The variance is the mean of squared deviations
// (two passes), not E[x^2] - mean^2, which cancels badly in fp32.

extern "C" __global__ void layernorm_naive(const float* __restrict__ x,
                                           const float* __restrict__ weight,
                                           const float* __restrict__ bias,
                                           float* __restrict__ y,
                                           int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;

    // size_t: rows * cols can pass 2^31.
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;

    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += xr[c];
    const float mean = s / (float)cols;

    float d = 0.0f;
    for (int c = 0; c < cols; ++c) {
        const float t = xr[c] - mean;
        d = fmaf(t, t, d);
    }
    const float rstd = 1.0f / sqrtf(d / (float)cols + 1e-5f);

    for (int c = 0; c < cols; ++c) yr[c] = fmaf((xr[c] - mean) * rstd, weight[c], bias[c]);
}
