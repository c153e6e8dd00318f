// ferry/transfer/to_host.hpp: to_host, device data back into a std::vector in one blocking call
// (for checks, tests and start-up: not for hot paths).
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/event.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/transfer/async_d2h.hpp>
#include <ferry/transfer/detail/source.hpp>

#include <algorithm>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace ferry {

/// Copies `src` into a new std::vector and returns it once the copy is done: enqueues on `s` the
/// copy of `src` into a pinned staging block of `arena`, waits for it (an event recorded after
/// the copy: everything enqueued on `s` before the call has run too), then copies the block into
/// the vector. Blocking, and counted as one synchronization by the backend's counters
/// (ferry::backend_stats_of, sync_guard), as event::synchronize is, also for an empty `src`.
/// For checks, tests and start-up: a hot path reads back with async_d2h into a pinned buffer it
/// keeps, and an event it waits for only when it needs the data.
///
/// Errors: a span of more elements than a std::vector holds (its max_size()) is
/// std::invalid_argument, and a vector that cannot be allocated ferry::out_of_memory, before
/// anything is enqueued; rethrows (once) an error raised by host work enqueued on `s` before the
/// call, as event::synchronize does; the staging block goes back to the arena whatever happens.
template <class T, class B>
[[nodiscard]] std::vector<std::remove_cv_t<T>> to_host(device_span<T> src, stream_ref<B> s,
                                                       pinned_arena<B>& arena) {
  using U = std::remove_cv_t<T>;
  detail::check_element<U>();
  using ops = detail::backend_ops<B>;
  ops::check_stream(s, ops::current_device());
  const std::size_t n = src.size();
  std::vector<U> out;
  event<B> done;
  if (n == 0) {
    done.record(s);
    done.synchronize();
    return out;
  }
  // The vector before the copy is enqueued: a refusal here leaves nothing in flight.
  if (n > out.max_size())
    throw std::invalid_argument("ferry: to_host: a span of " + std::to_string(n) +
                                " elements is more than a std::vector holds (max_size " +
                                std::to_string(out.max_size()) + ")");
  try {
    out.resize(n);
  } catch (const std::bad_alloc&) {
    throw out_of_memory("ferry: to_host: a std::vector of " + std::to_string(n) + " elements (" +
                        std::to_string(n * sizeof(U)) + " bytes) cannot be allocated");
  }
  detail::block_guard<B> staging(arena, arena.acquire(n * sizeof(U)));
  const pinned_span<U> block = detail::make_pinned_span(static_cast<U*>(static_cast<void*>(staging.get().data)), n);
  try {
    static_cast<void>(async_d2h(device_span<const U>(src), block, s));
    done.record(s);
    done.synchronize();
  } catch (...) {
    // The copy may still be in flight (its wait threw): the block is reused once `s` passed it.
    if (const pinned_block b = staging.release()) arena.release(b, s);
    throw;
  }
  std::copy(block.begin(), block.end(), out.begin());
  return out;  // the guard gives the block back unfenced: the copy has completed
}

/// to_host staging through default_arena<B>().
template <class T, class B>
[[nodiscard]] std::vector<std::remove_cv_t<T>> to_host(device_span<T> src, stream_ref<B> s) {
  return to_host(src, s, default_arena<B>());
}

/// 0, NULL or nullptr in the stream's place: ferry has no default stream (a compile error).
template <class Src, detail::null_stream_argument Z, class... Rest>
auto to_host(Src&&, Z, Rest&&...) {
  static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  return detail::no_default_stream{};
}

}  // namespace ferry
