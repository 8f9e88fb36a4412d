// matmul_naive: out[M, N] = A[M, K] @ B[K, N], row-major fp32, one thread per output.
// Launch: grid = (ceil_div(N, 16), ceil_div(M, 16)), block = (16, 16).
extern "C" __global__ void matmul_naive(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ out, int M, int K, int N)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    out[(size_t)row * N + col] = acc;
}
