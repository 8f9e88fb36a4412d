// argmax_dim1: out[b, j] = the first i with x[b, i, j] largest over i, for x of batch_size
// x dim1 x dim2 (fp32) and out of batch_size x dim2 (int64), as torch.argmax(x, dim=1).
// One thread per (b, j): neighbouring threads read neighbouring j, so loads coalesce; a
// strictly larger value replaces the best, so ties keep the first index.
// Launch: grid = (ceil_div(dim2, 256), batch_size), block = (256).
extern "C" __global__ void argmax_dim1(const float* __restrict__ x, long long* __restrict__ out,
                                       int batch_size, int dim1, int dim2)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y;
    if (j >= dim2 || b >= batch_size) return;
    const float* xb = x + (size_t)b * dim1 * dim2 + j;
    float best = xb[0];
    int at = 0;
    for (int i = 1; i < dim1; ++i) {
        const float v = xb[(size_t)i * dim2];
        if (v > best) {
            best = v;
            at = i;
        }
    }
    out[(size_t)b * dim2 + j] = at;
}
