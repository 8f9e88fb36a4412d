// layernorm_planes: nn.LayerNorm over the last three dimensions (KernelBench level 1,
// problem 40): for each of batch_size rows of features * dim1 * dim2 fp32 values,
// out = (x - mean) / sqrt(var + 1e-5) * ln_weight + ln_bias, ln_weight and ln_bias of one
// row's shape. One block per row, three passes (mean, then the variance about it, which
// stays accurate where the sum of squares would cancel, then the output); sums in fp32
// per thread and in double across the block.
// Launch: grid = (batch_size), block = (1024).
__device__ double block_sum(double v, double* scratch)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        double w = threadIdx.x < blockDim.x / 32 ? scratch[threadIdx.x] : 0.0;
        for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
        if (threadIdx.x == 0) scratch[32] = w;
    }
    __syncthreads();
    const double total = scratch[32];
    __syncthreads();  // scratch is reused by the next sum
    return total;
}

extern "C" __global__ void __launch_bounds__(1024)
layernorm_planes(const float* __restrict__ x, const float* __restrict__ ln_weight, const float* __restrict__ ln_bias,
                 float* __restrict__ out, int batch_size, int features, int dim1, int dim2)
{
    __shared__ double scratch[33];
    const long long n = (long long)features * dim1 * dim2;
    const float* xr = x + (long long)blockIdx.x * n;
    float* outr = out + (long long)blockIdx.x * n;
    float s = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    const float mean = (float)(block_sum(s, scratch) / (double)n);
    float q = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const float d = xr[i] - mean;
        q = fmaf(d, d, q);
    }
    const float inv = rsqrtf((float)(block_sum(q, scratch) / (double)n) + 1e-5f);
    for (long long i = threadIdx.x; i < n; i += blockDim.x)
        outr[i] = (xr[i] - mean) * inv * ln_weight[i] + ln_bias[i];
}
