// The measurement recipe: warm up, then time each launch between its own pair of
// CUDA events, with the L2 flushed before each one (cold) or not (hot). Only
// samples come back; statistics live in Python. The numbers come from the timing
// policy (agent/spec/timing_policy.py); the defaults here are that policy's.
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
  double warmup_share = 0.25;  // of max_total_ms, at most, spent warming up
};

struct TimingResult {
  std::vector<float> samples_ms;  // one per measured launch, in launch order
  double warmup_mean_ms = 0.0;
};

using Enqueue = std::function<void(CUstream)>;

// Work enqueued around a launch, outside its event pair: `before` runs ahead of
// every launch (warm-up ones get index -1), `after` behind every measured launch
// (index 0..n-1). The harness poisons outputs before and checks them after, so
// every timed launch starts from outputs it cannot predict and is itself judged;
// neither enters a sample.
using Around = std::function<void(CUstream, int)>;

// Runs `enqueue` (a kernel launch or a library call) under the recipe; throws
// CudaError carrying the fault's name if a launch fails or faults.
TimingResult time_loop(Device& device, const Enqueue& enqueue, const TimingSettings& settings,
                       const Around& before = {}, const Around& after = {});

}  // namespace ws
