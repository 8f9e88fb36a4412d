// The measurement recipe: warm up, then time each launch between its own pair of
// CUDA events, with the L2 flushed before each one (cold) or not (hot). Only
// samples come back; statistics live in Python.
#pragma once
#include <functional>
#include <vector>

#include "device.hpp"

namespace ws {

struct TimingSettings {
  int warmup = 10;
  int repetitions = 100;
  bool flush_l2 = true;
  // Cap on the measured loop: when the warm-up says `repetitions` launches would
  // take longer, fewer are run (never fewer than min_repetitions).
  double max_total_ms = 300.0;
  int min_repetitions = 10;
};

struct TimingResult {
  std::vector<float> samples_ms;  // one per measured launch, in launch order
  double warmup_mean_ms = 0.0;
};

using Enqueue = std::function<void(CUstream)>;

// Runs `enqueue` (a kernel launch or a library call) under the recipe; throws
// CudaError carrying the fault's name if a launch fails or faults.
TimingResult time_loop(Device& device, const Enqueue& enqueue, const TimingSettings& settings);

}  // namespace ws
