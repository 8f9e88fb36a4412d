// square_matmul: out = A @ B, all N x N, fp32, accumulated in fp32 (KernelBench level 1,
// problem 1). A 64 x 64 tile of out per block of 16 x 16 threads, each thread 4 x 4 outputs
// from a 64 x 16 slice of A and a 16 x 64 slice of B in shared memory: every loaded element
// is used 4 times from registers. Any N (edges are bounds-checked).
// Launch: grid = (ceil_div(N, 64), ceil_div(N, 64)), block = (16, 16).
extern "C" __global__ void __launch_bounds__(256)
square_matmul(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ out, int N)
{
    __shared__ float As[16][64 + 1];  // As[k][row]: the +1 keeps the transposed stores apart
    __shared__ float Bs[16][64];
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
    const int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < N; k0 += 16) {
        for (int i = t; i < 64 * 16; i += 256) {
            const int r = i / 16, k = i % 16;  // A: 16 consecutive k of a row per 16 threads
            const int gr = row0 + r, gk = k0 + k;
            As[k][r] = (gr < N && gk < N) ? A[(size_t)gr * N + gk] : 0.0f;
            const int kb = i / 64, c = i % 64;  // B: 64 consecutive columns per 64 threads
            const int gkb = k0 + kb, gc = col0 + c;
            Bs[kb][c] = (gkb < N && gc < N) ? B[(size_t)gkb * N + gc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            float a[4], b[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) a[u] = As[k][ty + 16 * u], b[u] = Bs[k][tx + 16 * u];
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[u][v] = fmaf(a[u], b[v], acc[u][v]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int r = row0 + ty + 16 * u;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            const int c = col0 + tx + 16 * v;
            if (r < N && c < N) out[(size_t)r * N + c] = acc[u][v];
        }
    }
}
