// rmsnorm_channels: x / sqrt(mean over features of x^2 + 1e-5) for x of batch_size x
// features x dim1 x dim2 fp32, the mean taken across the features (dimension 1) at each
// (batch, position) (KernelBench level 1, problem 36). One thread per (batch, position):
// neighbouring threads read neighbouring positions of one feature plane (coalesced); the
// second pass finds its values in L1/L2.
// Launch: grid = (ceil_div(dim1 * dim2, 256), batch_size), block = (256).
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_channels(const float* __restrict__ x, float* __restrict__ out, int batch_size, int features, int dim1,
                 int dim2)
{
    const long long plane = (long long)dim1 * dim2;
    const long long p = (long long)blockIdx.x * 256 + threadIdx.x;
    if (p >= plane) return;
    const long long base = (long long)blockIdx.y * features * plane + p;
    float ss = 0.0f;
    for (int f = 0; f < features; ++f) {
        const float v = x[base + f * plane];
        ss = fmaf(v, v, ss);
    }
    const float inv = rsqrtf(ss / features + 1e-5f);
    for (int f = 0; f < features; ++f) out[base + f * plane] = x[base + f * plane] * inv;
}
