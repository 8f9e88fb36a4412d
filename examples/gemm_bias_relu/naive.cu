// gemm_bias_relu_naive: reference-style fused fp32 GEMM + bias + ReLU, one
// thread per output element.
//   C[M,N] = relu(A[M,K] @ B[K,N] + bias[N]), all row-major, fp32 accumulation
//   in k order; bias and ReLU applied in the store, so C is written once.
// Launch rule:
//   block = (16, 16, 1)
//   grid  = (ceil_div(N, 16), ceil_div(M, 16), 1)
//   shared = 0
// Threads outside [0,M) x [0,N) do nothing (bounds-checked), so any M, N, K work.

extern "C" __global__ void gemm_bias_relu_naive(const float* __restrict__ A,
                                                const float* __restrict__ B,
                                                const float* __restrict__ bias,
                                                float* __restrict__ C,
                                                int M, int N, int K)
{
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;

    const float* a = A + (size_t)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc = fmaf(a[k], B[(size_t)k * N + col], acc);
    }
    C[(size_t)row * N + col] = fmaxf(acc + bias[col], 0.0f);
}
