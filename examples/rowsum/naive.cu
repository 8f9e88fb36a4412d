// rowsum_naive: the simple start, one thread per row, sequential fp32 sum.
//   y[r] = sum_c x[r, c], x row-major [rows, cols].
// Launch rule:
//   block = (256, 1, 1)
//   grid  = (ceil_div(rows, 256), 1, 1)
//   shared = 0
// Threads past the last row do nothing, so any rows, cols work. Neighbouring
// threads read addresses cols floats apart (uncoalesced): correct but slow,
// which is the point of a starting kernel.

extern "C" __global__ void rowsum_naive(const float* __restrict__ x,
                                        float* __restrict__ y,
                                        int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;

    const float* xr = x + (size_t)row * cols;
    float acc = 0.0f;
    for (int c = 0; c < cols; ++c) acc += xr[c];
    y[row] = acc;
}
