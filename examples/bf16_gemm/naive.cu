// One output per thread: a dot product of a row of A and a column of B, each
// product and sum in float32, the result rounded once to bfloat16. The starting
// rung: no shared memory, no tensor cores.
#include <cuda_bf16.h>

extern "C" __global__ void bf16_gemm_naive(const __nv_bfloat16* __restrict__ A,
                                           const __nv_bfloat16* __restrict__ B,
                                           __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const __nv_bfloat16* a = A + (long long)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc = fmaf(__bfloat162float(a[k]), __bfloat162float(B[(long long)k * N + col]), acc);
    C[(long long)row * N + col] = __float2bfloat16(acc);
}
