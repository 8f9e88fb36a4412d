// masked_cumsum_rows: out[r, i] = the sum of x[r, j] over j <= i where mask[r, j] is true, for x
// (fp32) and mask (bool, one byte) of batch_size x length.
// One block of 1024 threads per row, in chunks of 1024: each chunk is scanned within its
// warps (shuffles), the 32 warp totals are scanned by the first warp, and a running carry
// adds the chunks before it.
// Launch: grid = (batch_size), block = (1024).
extern "C" __global__ void masked_cumsum_rows(const float* __restrict__ x, const bool* __restrict__ mask,
                                              float* __restrict__ out, int batch_size, int length)
{
    __shared__ float warp_total[32];
    __shared__ float carry;
    const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (row >= batch_size) return;  // uniform per block
    const float* xr = x + (size_t)row * length;
    const bool* mr = mask + (size_t)row * length;
    float* yr = out + (size_t)row * length;
    if (threadIdx.x == 0) carry = 0.0f;
    __syncthreads();
    for (int base = 0; base < length; base += 1024) {
        const int i = base + threadIdx.x;
        float v = i < length && mr[i] ? xr[i] : 0.0f;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float n = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += n;
        }
        if (lane == 31) warp_total[warp] = v;
        __syncthreads();
        if (warp == 0) {
            float t = warp_total[lane];
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float n = __shfl_up_sync(0xffffffffu, t, o);
                if (lane >= o) t += n;
            }
            warp_total[lane] = t;  // inclusive: warps 0..lane
        }
        __syncthreads();
        const float before = carry + (warp > 0 ? warp_total[warp - 1] : 0.0f);
        if (i < length) yr[i] = before + v;
        __syncthreads();  // every thread has read carry and warp_total
        if (threadIdx.x == 0) carry += warp_total[31];
        __syncthreads();
    }
}
