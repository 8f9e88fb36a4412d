// relu: out = max(x, 0) elementwise over batch_size x dim fp32 (KernelBench level 1, problem
// 19). Each thread four consecutive elements; the count is a 64-bit product, since a
// problem's batch_size * dim may pass 2^31.
// Launch: grid = (ceil_div(batch_size * dim, 1024)), block = (256).
extern "C" __global__ void __launch_bounds__(256)
relu(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim)
{
    const long long n = (long long)batch_size * dim;
    const long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 4;
    if (i + 3 < n && ((reinterpret_cast<size_t>(x + i) | reinterpret_cast<size_t>(out + i)) & 15) == 0) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        *reinterpret_cast<float4*>(out + i) = make_float4(fmaxf(v.x, 0.0f), fmaxf(v.y, 0.0f), fmaxf(v.z, 0.0f),
                                                          fmaxf(v.w, 0.0f));
        return;
    }
    for (long long j = i; j < i + 4 && j < n; ++j) out[j] = fmaxf(x[j], 0.0f);
}
