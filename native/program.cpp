#include "program.hpp"

#include <utility>

namespace ws {

void Program::add_launch(const Function& fn, const LaunchConfig& cfg, KernelArgs args) {
  Step s;
  s.fn = fn;
  s.cfg = cfg;
  s.args = std::move(args);
  steps_.push_back(std::move(s));
}

void Program::add_memset_u32(CUdeviceptr ptr, size_t bytes, uint32_t value) {
  if (bytes % 4)
    throw CudaError("CUDA_ERROR_INVALID_VALUE", "a program's memset needs a multiple of 4 bytes",
                    "Program::add_memset_u32", CUDA_ERROR_INVALID_VALUE);
  Step s;
  s.memset = true;
  s.ptr = ptr;
  s.bytes = bytes;
  s.value = value;
  steps_.push_back(std::move(s));
}

void Program::enqueue(Device& device) {
  device.make_current();
  for (auto& s : steps_) {
    if (s.memset)
      WS_CU(driver().cuMemsetD32Async(s.ptr, s.value, s.bytes / 4, device.stream()));
    else
      launch(device, s.fn, s.cfg, s.args);
  }
}

}  // namespace ws
