#include "driver.hpp"

#include <cstdio>
#include <mutex>

namespace ws {
namespace {

Driver load_driver() {
  static DynLib lib;
  std::string why;
  if (!lib.open({"libcuda.so.1", "libcuda.so"}, RTLD_NOW | RTLD_GLOBAL, why))
    throw CudaError("NO_DRIVER",
                    "no NVIDIA driver: libcuda.so.1 could not be loaded (" + why +
                        "). warpsmith needs an NVIDIA GPU with a CUDA 13 driver; "
                        "`warpsmith compile --arch sm_90` works without one",
                    "dlopen", -1);
  Driver d;
#define WS_LOAD(fn) lib.load(d.fn, WS_STR(fn), "libcuda");
  WS_DRIVER_FUNCTIONS(WS_LOAD)
#undef WS_LOAD
  return d;
}

Driver* g_driver = nullptr;

}  // namespace

std::string error_name(CUresult r) {
  const char* name = nullptr;
  if (g_driver && g_driver->cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (!g_driver || g_driver->cuGetErrorString(r, &text) != CUDA_SUCCESS || !text)
    text = "unknown error";
  std::string message = text;
  if (r == CUDA_ERROR_NO_DEVICE)
    message += ": no CUDA-capable GPU is visible to this process (check nvidia-smi and "
               "CUDA_VISIBLE_DEVICES)";
  throw CudaError(error_name(r), message, call, static_cast<int>(r));
}

void warn_if_failed(CUresult r, const char* call) {
  // Destructors must not throw; a failure here is reported, not hidden.
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
    std::fprintf(stderr, "warpsmith: %s failed during cleanup: %s\n", call, error_name(r).c_str());
}

const Driver& driver() {
  static std::once_flag once;
  static Driver d;
  std::call_once(once, [] {
    d = load_driver();
    g_driver = &d;
    check(d.cuInit(0), "cuInit(0)");
  });
  return d;
}

}  // namespace ws
