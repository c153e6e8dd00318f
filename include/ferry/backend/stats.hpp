// ferry/backend/stats.hpp: what a backend has allocated and how often ferry made it synchronize.
#pragma once

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

namespace detail {
struct backend_counters {
  std::atomic<std::uint64_t> pinned_allocations{0};
  std::atomic<std::uint64_t> pinned_frees{0};
  std::atomic<std::uint64_t> device_allocations{0};
  std::atomic<std::uint64_t> device_frees{0};
  std::atomic<std::uint64_t> synchronizations{0};
  std::atomic<std::uint64_t> completion_queries{0};
  // Counted on every enqueue, from any thread: its own cache line, away from the rarer counts.
  alignas(64) std::atomic<std::uint64_t> enqueues{0};

  backend_stats snapshot() const noexcept {
    constexpr auto r = std::memory_order_relaxed;
    return {pinned_allocations.load(r), pinned_frees.load(r), device_allocations.load(r),
            device_frees.load(r),       synchronizations.load(r), completion_queries.load(r),
            enqueues.load(r)};
  }
};

template <class B>
backend_counters& counters() noexcept {
  static backend_counters c;
  return c;
}
inline void count(std::atomic<std::uint64_t>& c) noexcept {
  c.fetch_add(1, std::memory_order_relaxed);
}

/// Waits this thread made for a full ring's next slot (back-pressure, reuse::event_fenced),
/// whichever backend call did the waiting, or none (a ferry kernel's counter polled): sync_guard
/// adds them to what CUPTI saw, so that a zero-sync proof sees every back-pressure wait.
inline thread_local std::uint64_t ring_waits = 0;
}  // namespace detail

/// The counters of backend B (see backend_stats).
template <class B>
backend_stats backend_stats_of() noexcept {
  return detail::counters<B>().snapshot();
}

}  // namespace ferry
