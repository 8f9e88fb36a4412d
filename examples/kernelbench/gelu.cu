// gelu: out = x * (1 + erf(x / sqrt(2))) / 2 elementwise over batch_size x dim fp32 values.
// Launch: grid = (ceil_div(batch_size * dim, 256)), block = (256).
extern "C" __global__ void gelu(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)batch_size * dim) return;
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}
