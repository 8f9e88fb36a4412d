// sum_dim1: out[b, 0, j] = sum over i of x[b, i, j], x of batch_size x dim1 x dim2, fp32.
// One thread per (b, j): neighbouring threads read neighbouring j, so loads coalesce.
// Launch: grid = (ceil_div(dim2, 256), batch_size), block = (256).
extern "C" __global__ void sum_dim1(const float* __restrict__ x, float* __restrict__ out,
                                    int batch_size, int dim1, int dim2)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y;
    if (j >= dim2 || b >= batch_size) return;
    const float* xb = x + (size_t)b * dim1 * dim2 + j;
    float acc = 0.0f;
    for (int i = 0; i < dim1; ++i) acc += xb[(size_t)i * dim2];
    out[(size_t)b * dim2 + j] = acc;
}
