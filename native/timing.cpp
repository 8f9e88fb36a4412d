#include "timing.hpp"

#include <algorithm>
#include <cmath>

namespace ws {
namespace {

// Owns a CUevent.
class Event {
 public:
  Event() { WS_CU(driver().cuEventCreate(&event_, CU_EVENT_DEFAULT)); }
  ~Event() {
    if (event_) driver().cuEventDestroy(event_);
  }
  Event(Event&& o) noexcept : event_(o.event_) { o.event_ = nullptr; }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(CUstream s) { WS_CU(driver().cuEventRecord(event_, s)); }
  CUevent get() const { return event_; }

 private:
  CUevent event_ = nullptr;
};

float elapsed_ms(const Event& a, const Event& b) {
  float ms = 0.f;
  WS_CU(driver().cuEventElapsedTime(&ms, a.get(), b.get()));
  return ms;
}

}  // namespace

TimingResult time_loop(Device& device, const Enqueue& enqueue, const TimingSettings& s,
                       const Around& before, const Around& after) {
  device.make_current();
  CUstream stream = device.stream();
  TimingResult result;

  // Warm-up: module load, caches and clocks settle. The first launch, timed on
  // its own, says what the rest cost; warm-up is kept to its share of the budget.
  auto run_timed = [&](int count) {
    Event a, b;
    a.record(stream);
    for (int i = 0; i < count; ++i) {
      if (before) before(stream, -1);
      if (s.flush_l2) device.flush_l2();
      enqueue(stream);
    }
    b.record(stream);
    WS_CU(driver().cuStreamSynchronize(stream));
    return elapsed_ms(a, b) / count;
  };
  double first_ms = run_timed(1);
  int more = std::max(0, s.warmup - 1);
  if (first_ms > 0)
    more = std::min<double>(more, std::floor(s.warmup_share * s.max_total_ms / first_ms));
  // The estimate includes flushes, so it errs on the side of fewer repetitions.
  result.warmup_mean_ms = more > 0 ? run_timed(more) : first_ms;

  int reps = std::max(1, s.repetitions);
  if (result.warmup_mean_ms > 0 && result.warmup_mean_ms * reps > s.max_total_ms) {
    int affordable = static_cast<int>(std::floor(s.max_total_ms / result.warmup_mean_ms));
    reps = std::max(std::min(s.min_repetitions, reps), affordable);
  }

  std::vector<Event> starts, ends;
  starts.reserve(reps);
  ends.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    starts.emplace_back();
    ends.emplace_back();
  }
  for (int i = 0; i < reps; ++i) {
    if (before) before(stream, i);
    // The flush comes after the poison, so the poisoned outputs are not in L2 either.
    if (s.flush_l2) device.flush_l2();
    starts[i].record(stream);
    enqueue(stream);
    ends[i].record(stream);
    if (after) after(stream, i);
  }
  WS_CU(driver().cuStreamSynchronize(stream));
  result.samples_ms.reserve(reps);
  for (int i = 0; i < reps; ++i) result.samples_ms.push_back(elapsed_ms(starts[i], ends[i]));
  return result;
}

}  // namespace ws
