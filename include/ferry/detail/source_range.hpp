// ferry/detail/source_range.hpp: reading a source range whose element count is known before it
// is read (sized, or traversable twice): the count, and the write of its elements to memory (one
// memcpy when contiguous, a gather through its iterators otherwise). Transfers, pools and staged
// writes all read their sources this way.
#pragma once

#include <ferry/detail/checked.hpp>

#include <cstddef>
#include <cstring>
#include <iterator>
#include <ranges>

namespace ferry::detail {

/// A source whose element count is known before it is read (sized, or traversable twice).
template <class S>
concept countable_source = std::ranges::sized_range<S> || std::ranges::forward_range<S>;

/// The number of elements of `r` (its size, or one traversal of a forward range).
template <class R>
std::size_t count_of(R& r) {
  if constexpr (std::ranges::sized_range<R>)
    return static_cast<std::size_t>(std::ranges::size(r));
  else
    return static_cast<std::size_t>(std::ranges::distance(r));
}

/// Writes the first `n` elements of `r` (n <= count_of(r)) to `dst`, whose element type the
/// dtype rule has matched with r's. A gather runs the range's own code, which may throw.
template <class T, class R>
void fill(R& r, T* dst, std::size_t n) {
  if constexpr (std::ranges::contiguous_range<R>) {
    if (n != 0)
      std::memcpy(static_cast<void*>(dst), static_cast<const void*>(std::ranges::data(r)),
                  checked_bytes(n, sizeof(T), "a source"));
  } else {
    auto it = std::ranges::begin(r);
    for (std::size_t i = 0; i < n; ++i, ++it) dst[i] = static_cast<T>(*it);
  }
}

}  // namespace ferry::detail
