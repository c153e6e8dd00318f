// ferry/step/step_stats.hpp: step_stats, what a step_batch holds and has done.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

/// What a ferry::step_batch holds and has done since construction (step_batch::stats()).
struct step_stats {
  std::uint64_t steps = 0;       ///< steps submitted
  std::size_t slots = 0;         ///< slots now (0 before reserve() or the first begin())
  std::size_t max_slots = 0;     ///< the most slots the batch may hold
  /// begin() calls that found the ring full and blocked until the next slot had passed
  /// (back-pressure, reuse::event_fenced): each a synchronization
  std::uint64_t full_waits = 0;
  std::uint64_t inserted = 0;    ///< slots inserted by begin() in front of a busy slot, none being free
  /// pinned blocks taken because a step outgrew its slot: at begin() (a slot fitted to the
  /// largest step so far) or while the step was being written (growth::pow2 and user policies)
  std::uint64_t grows = 0;
};

}  // namespace ferry
