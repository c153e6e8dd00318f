// ferry/transfer/async_h2d.hpp: async_h2d, a host range onto the device without blocking the host
// (SPEC §5): into a given device span, or into a new stream-ordered device_buffer.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/nvtx.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_buffer.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/transfer/copy_pool.hpp>
#include <ferry/transfer/detail/pipeline.hpp>
#include <ferry/transfer/detail/source.hpp>

#include <cstddef>
#include <limits>
#include <ranges>
#include <type_traits>

namespace ferry {

namespace detail {

/// The policies async_h2d and async_h2d_packed read: PinPolicy only (the backend is the stream's).
template <class... Policies>
using transfer_pin_t =
    typename policies<type_list<families::pin>, Policies...>::pin;

template <class Src>
constexpr void check_pinned_source() {
  static_assert(pinned_source<Src>,
                "ferry: pin::require accepts only pinned sources and this source is pageable; "
                "pass a ferry::pinned_span (from a ferry owner such as pinned_buffer::host(), or "
                "ferry::assume_pinned(span) for memory you pinned yourself), or use pin::stage to "
                "stage it through the pinned arena.");
}

/// The checks every async_h2d form makes, in this order: the dtype rule first, then the element
/// type, the policies, and under pin::require the pinned source.
template <class Src, class T, class... Policies>
constexpr void check_h2d() {
  check_same_element<source_element_t<Src>, T>();
  check_element<T>();
  static_assert(!std::is_const_v<T>,
                "ferry: async_h2d writes into out, so out must be a device_span of non-const "
                "elements.");
  using pin_policy = transfer_pin_t<Policies...>;
  if constexpr (pin_policy::pageable == pageable_source::reject) check_pinned_source<Src>();
}

/// Enqueues the copy of `n` elements already in `block` (an arena block) into `out`, and gives
/// the block back: fenced on `s` (asynchronous) or unused (after a blocking copy).
template <class Pin, class T, class B>
void send_block(pinned_block block, std::size_t n, device_span<T> out, stream_ref<B> s,
                pinned_arena<B>& arena) {
  using ops = backend_ops<B>;
  try {
    const std::size_t bytes = checked_bytes(n, sizeof(T), "a staging block");
    if constexpr (Pin::pageable == pageable_source::copy_blocking)
      ops::copy_blocking(out.data(), block.data, bytes, s);
    else
      ops::copy_async(out.data(), block.data, bytes, s);
  } catch (const timeout_error&) {
    arena.release(block, s);  // the blocking copy was enqueued and may still read the block
    throw;
  } catch (...) {
    arena.release(block);
    throw;
  }
  if constexpr (Pin::pageable == pageable_source::copy_blocking)
    arena.release(block);
  else
    arena.release(block, s);
}

/// The body of async_h2d(src, out, ...): checks done, stream not yet checked. `pool` is null for
/// the default copy pool.
template <class Pin, class Src, class T, class B>
device_span<T> h2d_into(Src& src, device_span<T> out, stream_ref<B> s, pinned_arena<B>& arena,
                        copy_pool* pool) {
  [[maybe_unused]] const nvtx_scope<nvtx_names::upload> range;
  using ops = backend_ops<B>;
  ops::check_stream(s, ops::current_device());
  constexpr const char* fn = "async_h2d";

  if constexpr (pinned_source<Src>) {
    // Pinned by type: DMA'd in place, under every PinPolicy.
    const std::size_t n = src.size();
    const std::size_t bytes = fitting_bytes<T>(fn, n, out.size());
    if (n == 0) return out.first(0);
    ops::copy_async(out.data(), src.data(), bytes, s);
    return out.first(n);
  } else if constexpr (countable_source<Src>) {
    // Sized or forward: counted, and checked against out, before any staging.
    const std::size_t n = count_of(src);
    const std::size_t bytes = fitting_bytes<T>(fn, n, out.size());
    if (n == 0) return out.first(0);
    if constexpr (Pin::pageable == pageable_source::copy_blocking && contiguous_source<Src>) {
      ops::copy_blocking(out.data(), std::ranges::data(src), bytes, s);
      return out.first(n);
    } else {
      if constexpr (Pin::pageable == pageable_source::stage && contiguous_source<Src>) {
        const std::size_t threshold = pool ? pool->threshold_bytes() : large_copy_threshold;
        if (bytes > threshold) {
          pipelined_upload<B>(reinterpret_cast<std::byte*>(out.data()),
                              reinterpret_cast<const std::byte*>(std::ranges::data(src)), bytes,
                              s, arena, pool ? *pool : default_copy_pool());
          return out.first(n);
        }
      }
      // The hot path: one arena block (no event query in steady state), one memcpy or gather,
      // one copy, one fence.
      block_guard<B> guard(arena, arena.acquire(bytes));
      fill(src, reinterpret_cast<T*>(guard.get().data), n);
      send_block<Pin>(guard.release(), n, out, s, arena);
      return out.first(n);
    }
  } else {
    // A single-pass range: gathered first (at most out.size() elements, and read on to one
    // element past that if the arena's cap is reached, so a misfit is always out_of_range).
    auto [block, n] = gather_input<T>(src, arena, out.size(), fn);
    if (n == 0) {
      arena.release(block);
      return out.first(0);
    }
    send_block<Pin>(block, n, out, s, arena);
    return out.first(n);
  }
}

}  // namespace detail

/// Copies the elements of `src` into the prefix of `out` on stream `s`; returns that prefix
/// (`out.first(size of src)`).
///
/// `src` is any std::ranges input range whose element type matches `T` by the dtype rule (same
/// type, or integers of the same size and signedness; otherwise a static_assert naming
/// ferry::cast<T>(range)). PinPolicy (the only policy; the backend is the stream's):
///  - `pin::stage` (default): a pageable source is copied into a block of `arena` (one memcpy if
///    contiguous, else gathered element by element) and sent by one asynchronous copy; the block
///    is reused once `s` has passed the copy. Never blocks the host, except for contiguous
///    sources above copy_pool::threshold_bytes() (large_copy_threshold, 4 MiB, by default), which
///    go through the chunked pipeline of `pool` (the default_copy_pool() unless given) and block
///    the host for the host-copy time (and, when the arena's cap is reached, for the oldest
///    chunk's copy: counted in the pool's pipeline_stats).
///  - `pin::require`: a pageable source does not compile; pass a ferry::pinned_span.
///  - `pin::allow_sync`: a pageable source is copied by a plain host-blocking copy (it returns
///    once the data is on the device: counted as a synchronization).
/// A ferry::pinned_span source is DMA'd in place under every policy (never staged, never
/// blocking).
///
/// Source lifetime: a pageable source has been consumed when the call returns (it may be
/// modified or freed at once); a pinned_span source must stay unmodified until `s` has passed
/// the copy. `out` must stay valid until then.
///
/// Errors: `src` larger than `out` → std::out_of_range, nothing enqueued, whatever the arena's
/// state: the size is checked before any staging (a single-pass source is read first, then
/// rejected; its staging block goes back unused). An empty source enqueues nothing and returns
/// `out.first(0)`. The arena's cap → ferry::capacity_error, nothing enqueued (except by the
/// pipeline, which may have enqueued earlier chunks).
template <class... Policies, std::ranges::input_range Src, class T, class B>
device_span<T> async_h2d(Src&& src, device_span<T> out, stream_ref<B> s, pinned_arena<B>& arena,
                         copy_pool& pool) {
  detail::check_h2d<Src, T, Policies...>();
  return detail::h2d_into<detail::transfer_pin_t<Policies...>>(src, out, s, arena, &pool);
}

/// async_h2d into `out`, staging through `arena` and, for large sources, the default_copy_pool().
template <class... Policies, std::ranges::input_range Src, class T, class B>
device_span<T> async_h2d(Src&& src, device_span<T> out, stream_ref<B> s, pinned_arena<B>& arena) {
  detail::check_h2d<Src, T, Policies...>();
  return detail::h2d_into<detail::transfer_pin_t<Policies...>>(src, out, s, arena, nullptr);
}

/// async_h2d into `out`, staging through default_arena<B>() and the default_copy_pool().
template <class... Policies, std::ranges::input_range Src, class T, class B>
device_span<T> async_h2d(Src&& src, device_span<T> out, stream_ref<B> s) {
  detail::check_h2d<Src, T, Policies...>();
  return detail::h2d_into<detail::transfer_pin_t<Policies...>>(src, out, s, default_arena<B>(),
                                                               nullptr);
}

/// Copies `src` into a new device_buffer<E, B> of exactly its size (E: the source's element
/// type), allocated in stream order on `s` (cudaMallocAsync: an allocation, so not part of
/// steady state) and freed in order on `s` by its destructor (so `s` must outlive it). Policies,
/// blocking and source lifetime as for async_h2d into `out`; a single-pass source is gathered
/// first. A source whose bytes do not fit in size_t → std::invalid_argument, nothing allocated.
template <class... Policies, std::ranges::input_range Src, class B>
[[nodiscard]] auto async_h2d(Src&& src, stream_ref<B> s, pinned_arena<B>& arena) {
  using T = detail::source_element_t<Src>;
  using ops = detail::backend_ops<B>;
  detail::check_h2d<Src, T, Policies...>();
  using pin_policy = detail::transfer_pin_t<Policies...>;
  ops::check_stream(s, ops::current_device());
  if constexpr (detail::pinned_source<Src> || detail::countable_source<Src>) {
    device_buffer<T, B> buf(detail::count_of(src), s);
    detail::h2d_into<pin_policy>(src, buf.span(), s, arena, nullptr);
    return buf;
  } else {
    auto [block, n] = detail::gather_input<T>(src, arena, std::numeric_limits<std::size_t>::max(),
                                              "async_h2d");
    detail::block_guard<B> guard(arena, block);
    device_buffer<T, B> buf(n, s);
    if (n != 0) detail::send_block<pin_policy>(guard.release(), n, buf.span(), s, arena);
    return buf;
  }
}

/// async_h2d into a new stream-ordered device_buffer, staging through default_arena<B>().
template <class... Policies, std::ranges::input_range Src, class B>
[[nodiscard]] auto async_h2d(Src&& src, stream_ref<B> s) {
  return async_h2d<Policies...>(static_cast<Src&&>(src), s, default_arena<B>());
}

/// 0, NULL or nullptr in the stream's place: ferry has no default stream (a compile error).
template <class... Policies, class Src, class Out, detail::null_stream_argument Z, class... Rest>
auto async_h2d(Src&&, Out&&, Z, Rest&&...) {
  static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  return detail::no_default_stream{};
}
/// 0, NULL or nullptr in the stream's place: ferry has no default stream (a compile error).
template <class... Policies, class Src, detail::null_stream_argument Z, class... Rest>
auto async_h2d(Src&&, Z, Rest&&...) {
  static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  return detail::no_default_stream{};
}

}  // namespace ferry
