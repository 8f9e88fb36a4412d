// layernorm_rows: out[r, :] = (x[r, :] - mean) / sqrt(var + 1e-5) * ln_weight + ln_bias, per row
// of x (batch_size x dim, fp32), the variance biased (nn.LayerNorm's). One block of 256
// threads per row, two passes (mean, then the centred sum of squares) reduced in shared memory.
// Launch: grid = (batch_size), block = (256).
#define THREADS 256

__device__ float block_sum(float v, float* scratch)
{
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
        __syncthreads();
    }
    const float r = scratch[0];
    __syncthreads();  // scratch is reused by the next sum
    return r;
}

extern "C" __global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ ln_weight,
                                          const float* __restrict__ ln_bias, float* __restrict__ out,
                                          int batch_size, int dim)
{
    __shared__ float scratch[THREADS];
    const int row = blockIdx.x;
    if (row >= batch_size) return;  // uniform per block
    const float* xr = x + (size_t)row * dim;
    float* yr = out + (size_t)row * dim;
    float s = 0.0f;
    for (int c = threadIdx.x; c < dim; c += THREADS) s += xr[c];
    const float mean = block_sum(s, scratch) / dim;
    float q = 0.0f;
    for (int c = threadIdx.x; c < dim; c += THREADS) {
        const float d = xr[c] - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_sum(q, scratch) / dim + 1e-5f);
    for (int c = threadIdx.x; c < dim; c += THREADS) yr[c] = (xr[c] - mean) * rstd * ln_weight[c] + ln_bias[c];
}
