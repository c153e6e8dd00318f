// ferry/backend/detail/counters.hpp: the process-wide counters behind backend_stats (one set per
// backend) and the waits of ferry's own that sync scopes add to what they see.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry::detail {

/// The counts of backend_stats, per backend, updated from any thread.
struct backend_counters {
  std::atomic<std::uint64_t> pinned_allocations{0};
  std::atomic<std::uint64_t> pinned_frees{0};
  std::atomic<std::uint64_t> device_allocations{0};
  std::atomic<std::uint64_t> device_frees{0};
  std::atomic<std::uint64_t> synchronizations{0};
  std::atomic<std::uint64_t> completion_queries{0};
  // Counted on every enqueue, from any thread: its own cache line, away from the rarer counts.
  alignas(64) std::atomic<std::uint64_t> enqueues{0};
};

template <class B>
backend_counters& counters() noexcept {
  static backend_counters c;
  return c;
}
inline void count(std::atomic<std::uint64_t>& c) noexcept {
  c.fetch_add(1, std::memory_order_relaxed);
}

/// Waits this thread made for a full ring's next slot (back-pressure, reuse::event_fenced).
inline thread_local std::uint64_t ring_waits = 0;

/// Waits of ferry's own on CUDA that this thread blocked in without a synchronizing runtime call
/// (bounded waits poll: an event's, a ring's, a blocking copy's; a device synchronize runs on a
/// helper thread): sync_guard adds them to what CUPTI saw, so that a zero-sync proof sees them.
inline thread_local std::uint64_t blocking_waits = 0;

}  // namespace ferry::detail
