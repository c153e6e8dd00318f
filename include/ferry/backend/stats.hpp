// ferry/backend/stats.hpp: what a backend has allocated and how often ferry made it synchronize.
#pragma once

#include <ferry/backend/detail/counters.hpp>

#include <atomic>
#include <cstdint>

namespace ferry {

/// Counts of the backend calls ferry itself made, per backend, for the whole process. They count
/// at the backend (every cudaHostAlloc / cudaMalloc / synchronizing call ferry issues, or the host
/// backend's equivalents), not in a component's own bookkeeping, so a test that reads them before
/// and after a steady-state loop sees every allocation and synchronization ferry caused.
struct backend_stats {
  std::uint64_t pinned_allocations = 0;  ///< pinned (mapped) host allocations
  std::uint64_t pinned_frees = 0;        ///< pinned frees
  std::uint64_t device_allocations = 0;  ///< device allocations (plain and stream-ordered)
  std::uint64_t device_frees = 0;        ///< device frees
  std::uint64_t synchronizations = 0;  ///< host-blocking waits: stream/event sync, blocking copies
  /// non-blocking completion queries (CUDA: cudaEventQuery, a driver call whose cost is in
  /// docs/backends.md, "Counting what ferry does"; the host backend reads a counter and counts none)
  std::uint64_t completion_queries = 0;
  /// operations ferry put on a stream: copies, fills, kernel and graph launches, host functions,
  /// event records and waits, stream-ordered allocations and frees (what each backend enqueues
  /// for them: on the host backend a mark or an event record is a counter read, no task)
  std::uint64_t enqueues = 0;
};

/// The counters of backend B (see backend_stats).
template <class B>
backend_stats backend_stats_of() noexcept {
  constexpr auto r = std::memory_order_relaxed;
  const detail::backend_counters& c = detail::counters<B>();
  return {c.pinned_allocations.load(r), c.pinned_frees.load(r),      c.device_allocations.load(r),
          c.device_frees.load(r),       c.synchronizations.load(r), c.completion_queries.load(r),
          c.enqueues.load(r)};
}

}  // namespace ferry
