#include "cublas_baseline.hpp"

#include <mutex>

#include "dynlib.hpp"

namespace ws {
namespace {

// From cublas_api.h; the ABI has been stable since CUDA 4 (the _v2 entry points).
using Status = int;
using Handle = void*;
constexpr int kOpN = 0;
constexpr int kDefaultMath = 0;
constexpr int kR16BF = 14;         // cudaDataType CUDA_R_16BF (library_types.h)
constexpr int kCompute32F = 68;    // cublasComputeType_t CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;   // cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT

struct Api {
  Status (*create)(Handle*) = nullptr;
  Status (*destroy)(Handle) = nullptr;
  Status (*set_stream)(Handle, CUstream) = nullptr;
  Status (*set_math_mode)(Handle, int) = nullptr;
  Status (*get_version)(Handle, int*) = nullptr;
  Status (*set_workspace)(Handle, void*, size_t) = nullptr;
  Status (*sgemm)(Handle, int, int, int, int, int, const float*, const float*, int, const float*,
                  int, const float*, float*, int) = nullptr;
  Status (*gemm_ex)(Handle, int, int, int, int, int, const void*, const void*, int, int,
                    const void*, int, int, const void*, void*, int, int, int, int) = nullptr;
};

const char* status_name(Status s) {
  switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

void check(Status s, const char* call) {
  if (s != 0) throw CudaError(status_name(s), "cuBLAS call failed", call, s);
}

std::mutex g_mutex;
Api g_api;
DynLib g_lib;

const Api& api(const std::vector<std::string>& candidates) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_lib.loaded()) return g_api;
  std::string why;
  if (!g_lib.open(candidates, RTLD_NOW | RTLD_GLOBAL, why))
    throw CudaError("CUBLAS_NOT_FOUND",
                    "cuBLAS (libcublas.so.13) could not be loaded (" + why +
                        "); run `pip install nvidia-cublas` for the baseline",
                    "dlopen", -1);
  g_lib.load(g_api.create, "cublasCreate_v2", "cuBLAS");
  g_lib.load(g_api.destroy, "cublasDestroy_v2", "cuBLAS");
  g_lib.load(g_api.set_stream, "cublasSetStream_v2", "cuBLAS");
  g_lib.load(g_api.set_math_mode, "cublasSetMathMode", "cuBLAS");
  g_lib.load(g_api.get_version, "cublasGetVersion_v2", "cuBLAS");
  g_lib.load(g_api.set_workspace, "cublasSetWorkspace_v2", "cuBLAS");
  g_lib.load(g_api.sgemm, "cublasSgemm_v2", "cuBLAS");
  g_lib.load(g_api.gemm_ex, "cublasGemmEx", "cuBLAS");
  return g_api;
}

}  // namespace

Cublas::Cublas(std::shared_ptr<Device> device, const std::vector<std::string>& candidates)
    : device_(std::move(device)) {
  const Api& a = api(candidates);
  path_ = g_lib.path();
  device_->make_current();
  check(a.create(&handle_), "cublasCreate_v2");
  check(a.set_math_mode(handle_, kDefaultMath), "cublasSetMathMode(CUBLAS_DEFAULT_MATH)");
  check(a.get_version(handle_, &version_), "cublasGetVersion_v2");
  // cuBLAS's workspace on a buffer of ours, so the worker knows where it is and can fence
  // it while a candidate runs (else it is memory in the candidate's context that nothing
  // checks). kWorkspaceBytes is what NVIDIA recommends for Hopper (32 MiB; 4 MiB before).
  WS_CU(driver().cuMemAlloc(&workspace_, kWorkspaceBytes));
  bind(device_->stream());
}

Cublas::~Cublas() {
  device_->make_current();
  if (handle_) g_api.destroy(handle_);
  if (workspace_) driver().cuMemFree(workspace_);
}

void Cublas::bind(CUstream stream) {
  // Only when the stream changes: the GEMMs are enqueued inside the timed event pair. And
  // cublasSetStream resets the workspace to cuBLAS's own pool, so ours is given again after
  // it (as PyTorch does): the worker fences the buffer it knows, which must be the one used.
  if (bound_ok_ && stream == bound_) return;
  check(g_api.set_stream(handle_, stream), "cublasSetStream_v2");
  check(g_api.set_workspace(handle_, reinterpret_cast<void*>(workspace_), kWorkspaceBytes), "cublasSetWorkspace_v2");
  bound_ = stream;
  bound_ok_ = true;
}

void Cublas::sgemm_row_major(CUstream stream, uint64_t a, uint64_t b, uint64_t c, int m, int n,
                             int k, float alpha, float beta) {
  const Api& x = g_api;
  bind(stream);
  // cuBLAS is column-major: row-major C = A B is column-major C^T = B^T A^T.
  check(x.sgemm(handle_, kOpN, kOpN, n, m, k, &alpha, reinterpret_cast<const float*>(b), n,
                reinterpret_cast<const float*>(a), k, &beta, reinterpret_cast<float*>(c), n),
        "cublasSgemm_v2");
}

void Cublas::gemm_bf16_row_major(CUstream stream, uint64_t a, uint64_t b, uint64_t c, int m, int n,
                                 int k) {
  const Api& x = g_api;
  const float alpha = 1.f, beta = 0.f;  // fp32 scalars: the compute type is fp32
  bind(stream);
  // Column-major C^T = B^T A^T, as for SGEMM.
  check(x.gemm_ex(handle_, kOpN, kOpN, n, m, k, &alpha, reinterpret_cast<const void*>(b), kR16BF, n,
                  reinterpret_cast<const void*>(a), kR16BF, k, &beta, reinterpret_cast<void*>(c),
                  kR16BF, n, kCompute32F, kGemmDefault),
        "cublasGemmEx(bf16, CUBLAS_COMPUTE_32F)");
}

}  // namespace ws
