// C = max(C + bias[col], 0), grid-stride: the epilogue an unfused cuBLAS user launches
// (GpuWorker.bias_relu, agent/worker/gpu_side.py).

extern "C" __global__ void ws_bias_relu(float* c, const float* __restrict__ bias, long long count, int n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
    c[i] = fmaxf(c[i] + bias[i % n], 0.f);
}
