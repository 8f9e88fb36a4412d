// softmax_rows: out[r, :] = softmax(x[r, :]) for x of batch_size x dim, row-major fp32.
// One block of 256 threads per row; max and sum reduced through shared memory.
// Launch: grid = (batch_size), block = (256).
#define THREADS 256

__device__ float block_reduce(float v, float* scratch, bool take_max)
{
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            const float o = scratch[threadIdx.x + half];
            scratch[threadIdx.x] = take_max ? fmaxf(scratch[threadIdx.x], o) : scratch[threadIdx.x] + o;
        }
        __syncthreads();
    }
    const float r = scratch[0];
    __syncthreads();  // scratch is reused by the next reduction
    return r;
}

extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ out,
                                        int batch_size, int dim)
{
    __shared__ float scratch[THREADS];
    const int row = blockIdx.x;
    if (row >= batch_size) return;  // uniform per block
    const float* xr = x + (size_t)row * dim;
    float* yr = out + (size_t)row * dim;
    float m = __int_as_float(0xff800000);  // -inf
    for (int c = threadIdx.x; c < dim; c += THREADS) m = fmaxf(m, xr[c]);
    m = block_reduce(m, scratch, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < dim; c += THREADS) s += expf(xr[c] - m);
    s = block_reduce(s, scratch, false);
    for (int c = threadIdx.x; c < dim; c += THREADS) yr[c] = expf(xr[c] - m) / s;
}
