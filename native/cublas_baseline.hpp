// cuBLAS, loaded at run time, for the baseline a user would pick instead of a
// custom GEMM. Declares only the handful of entry points it calls.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "device.hpp"

namespace ws {

class Cublas {
 public:
  // Loads the first library in `candidates` that opens and creates a handle bound
  // to the device's stream. Math mode is CUBLAS_DEFAULT_MATH: fp32 GEMM stays
  // fp32 (no TF32), which is what an fp32 workload must be compared against.
  Cublas(std::shared_ptr<Device> device, const std::vector<std::string>& candidates);
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  // Row-major C[M,N] = alpha * A[M,K] @ B[K,N] + beta * C, enqueued on `stream`.
  void sgemm_row_major(CUstream stream, uint64_t a, uint64_t b, uint64_t c, int m, int n, int k,
                       float alpha, float beta);
  // Row-major bf16 C[M,N] = A[M,K] @ B[K,N] with fp32 accumulation
  // (cublasGemmEx, CUDA_R_16BF operands, CUBLAS_COMPUTE_32F): what a bf16 user calls.
  void gemm_bf16_row_major(CUstream stream, uint64_t a, uint64_t b, uint64_t c, int m, int n,
                           int k);
  const std::string& path() const { return path_; }
  int version() const { return version_; }
  // The workspace cuBLAS was given (cublasSetWorkspace): the worker fences it while a candidate runs.
  uint64_t workspace_ptr() const { return static_cast<uint64_t>(workspace_); }
  size_t workspace_bytes() const { return kWorkspaceBytes; }
  static constexpr size_t kWorkspaceBytes = 32u << 20;

 private:
  void bind(CUstream stream);  // the handle on `stream`, with our workspace

  std::shared_ptr<Device> device_;
  void* handle_ = nullptr;
  CUdeviceptr workspace_ = 0;
  CUstream bound_ = nullptr;  // the stream the handle (and our workspace) were last set for
  bool bound_ok_ = false;
  std::string path_;
  int version_ = 0;
};

}  // namespace ws
