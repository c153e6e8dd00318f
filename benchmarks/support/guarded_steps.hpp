// Benchmark support: the untimed guard pass of a ferry row, which counts the synchronizations and
// allocations its warm steps make (ferry::sync_guard, CUDA).
#pragma once

#include <ferry/sync/sync_guard.hpp>

#include <cstdint>
#include <string>

namespace ferry_bench {

/// What guarded_steps() counted: per step, and the report of the last burst that made any.
struct guarded_counts {
  double syncs = 0, allocations = 0;
  std::string report;
};

/// `steps` warm steps (`step()`) in bursts of `burst` inside ferry::sync_guard, the stream drained
/// (`drain()`) between bursts outside the guards, so that no burst runs further ahead than the
/// measured ones.
template <class Step, class Drain>
guarded_counts guarded_steps(Step&& step, Drain&& drain, int steps = 1000, int burst = 250) {
  std::uint64_t syncs = 0, allocations = 0;
  guarded_counts out;
  drain();
  for (int done = 0; done < steps; done += burst) {
    {
      ferry::sync_guard guard(ferry::sync_guard::mode::record);
      for (int k = 0; k < burst; ++k) step();
      syncs += guard.syncs();
      allocations += guard.allocations();
      if (guard.syncs() + guard.allocations() != 0) out.report = guard.report();
    }
    drain();
  }
  out.syncs = static_cast<double>(syncs) / steps;
  out.allocations = static_cast<double>(allocations) / steps;
  return out;
}

}  // namespace ferry_bench
