// ferry/pool/pool_stats.hpp: pool_stats, what a UVA pool holds and has done.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

/// What a ferry::uva_pool (or ferry::uva_backed) holds and has done since construction. A call
/// that throws changes none of these but `fence_hits`.
struct pool_stats {
  std::size_t slots = 0;       ///< slots in the ring now (the constructor's `slots` plus inserted)
  std::size_t max_slots = 0;   ///< the most slots the ring may hold
  std::uint64_t calls = 0;     ///< calls that returned (empty sources included)
  std::uint64_t grows = 0;     ///< slots grown (per GrowthPolicy) because a source exceeded them
  /// calls (reuse::event_fenced) that found the slot coming into use still being read, whether
  /// they then took a later free slot, inserted a slot (none was free), waited (the ring full:
  /// max_slots reached, or growth::fixed) or threw ferry::capacity_error (reuse::throw_when_full):
  /// how often readers were behind the pool
  std::uint64_t fence_hits = 0;
  /// calls that found the ring full and blocked until the slot coming into use was free
  /// (back-pressure, reuse::event_fenced): each a synchronization
  std::uint64_t full_waits = 0;
  std::uint64_t inserted = 0;  ///< slots inserted (from the arena) in front of a busy slot, none being free
  std::uint64_t fences = 0;    ///< fences recorded (reuse::event_fenced; 0 under caller_fenced)
};

}  // namespace ferry
