// ferry/transfer/detail/source.hpp: how a transfer reads its source range: the kinds of source
// (pinned span, contiguous pageable, countable, single-pass; counting and filling are in
// detail/source_range.hpp), and gathering a single-pass range into a growing arena block.
#pragma once

#include <ferry/detail/checked.hpp>
#include <ferry/detail/source_range.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/pinned_span.hpp>

#include <cstddef>
#include <cstring>
#include <iterator>
#include <ranges>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ferry::detail {

template <class S>
inline constexpr bool is_pinned_span_v = false;
template <class U>
inline constexpr bool is_pinned_span_v<pinned_span<U>> = true;

/// A source that is pinned by type: copied in place by DMA, never staged.
template <class S>
concept pinned_source = is_pinned_span_v<std::remove_cvref_t<S>>;

/// A source whose elements lie in one block of memory and whose size is known: one memcpy.
template <class S>
concept contiguous_source = std::ranges::contiguous_range<S> && std::ranges::sized_range<S>;

/// The element type of a source range, without cv.
template <class S>
using source_element_t = std::remove_cv_t<std::ranges::range_value_t<S>>;

[[noreturn]] inline void throw_too_small(const char* fn, std::size_t need, std::size_t have) {
  throw std::out_of_range(std::string("ferry: ") + fn + ": the source has " + std::to_string(need) +
                          " elements but out has room for " + std::to_string(have) +
                          "; nothing was enqueued");
}

[[noreturn]] inline void throw_too_small_input(const char* fn, std::size_t have) {
  throw std::out_of_range(std::string("ferry: ") + fn + ": the source has more than " +
                          std::to_string(have) +
                          " elements, the room in out; nothing was enqueued");
}

/// The bytes of a source of `n` elements of T bound for `room` elements: std::out_of_range when
/// it does not fit (checked before any staging, so that a misfit is never reported as anything
/// else).
template <class T>
std::size_t fitting_bytes(const char* fn, std::size_t n, std::size_t room) {
  if (n > room) throw_too_small(fn, n, room);
  return checked_bytes<std::out_of_range>(n, sizeof(T), fn);
}

/// Gives a block back unused unless dismissed (exception safety around user iteration).
template <class B>
class block_guard {
 public:
  block_guard(pinned_arena<B>& a, pinned_block b) noexcept : arena_(a), block_(b) {}
  block_guard(const block_guard&) = delete;
  block_guard& operator=(const block_guard&) = delete;
  ~block_guard() {
    if (block_) arena_.release(block_);
  }
  pinned_block release() noexcept { return std::exchange(block_, pinned_block{}); }
  [[nodiscard]] pinned_block get() const noexcept { return block_; }
  void reset(pinned_block b) noexcept { block_ = b; }

 private:
  pinned_arena<B>& arena_;
  pinned_block block_;
};

/// A single-pass source gathered into an arena block that grows (by acquiring a block twice as
/// large, copying, and giving the old one back unused) as elements arrive. At most `max`
/// elements: one more throws std::out_of_range after giving the block back, also when the arena's
/// cap is reached first (the rest of the source is then read, up to one element past `max`, so
/// that a source too large for out is reported as such). Returns the block (empty when the source
/// was) and the element count.
template <class T, class B, class S>
std::pair<pinned_block, std::size_t> gather_input(S& s, pinned_arena<B>& arena, std::size_t max,
                                                  const char* fn) {
  block_guard<B> guard(arena, {});
  std::size_t n = 0;
  auto it = std::ranges::begin(s);
  for (; it != std::ranges::end(s); ++it) {
    if (n == max) throw_too_small_input(fn, max);
    pinned_block b = guard.get();
    if (n == b.capacity / sizeof(T)) {  // full (block capacities are multiples of sizeof(T))
      const std::size_t want = b ? b.capacity * 2 : gather_first_block_bytes;  // capacity <= 2^62
      pinned_block bigger;
      try {
        bigger = arena.acquire(want);
      } catch (const capacity_error&) {
        for (; it != std::ranges::end(s); ++it, ++n)
          if (n == max) throw_too_small_input(fn, max);
        throw;
      }
      if (b) std::memcpy(bigger.data, b.data, b.capacity);
      guard.release();
      if (b) arena.release(b);
      guard.reset(bigger);
      b = bigger;
    }
    reinterpret_cast<T*>(b.data)[n++] = static_cast<T>(*it);
  }
  return {guard.release(), n};
}

}  // namespace ferry::detail
