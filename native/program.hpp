// A candidate program: an ordered sequence of kernel launches and 32-bit memsets,
// enqueued as one unit on the device's stream. Built once per case (pointers and
// scalars fixed), then run to be judged or timed between one pair of events.
#pragma once
#include <cstdint>
#include <vector>

#include "device.hpp"

namespace ws {

class Program {
 public:
  void add_launch(const Function& fn, const LaunchConfig& cfg, KernelArgs args);
  void add_memset_u32(CUdeviceptr ptr, size_t bytes, uint32_t value);
  size_t size() const { return steps_.size(); }
  // Enqueues every step in order; a launch-time refusal throws CudaError naming the step.
  void enqueue(Device& device);

 private:
  struct Step {
    bool memset = false;
    Function fn;
    LaunchConfig cfg;
    KernelArgs args;
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    uint32_t value = 0;
  };
  std::vector<Step> steps_;
};

}  // namespace ws
