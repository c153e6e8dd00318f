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

// Bytes [0, K) and [n - K, n) of src to dst (K <= n <= 2K): every byte, some twice alike.
template <std::size_t K>
FERRY_FORCE_INLINE inline void copy_ends(unsigned char* d, const unsigned char* s, std::size_t n) {
  std::memcpy(d, s, K);
  std::memcpy(d + n - K, s + n - K, K);
}

/// std::memcpy of `n` bytes between buffers that do not overlap, with up to 64 bytes copied
/// inline by fixed-size moves: a staged write of a few elements would otherwise spend more time
/// in the library call than in the copy. 32 and 64 bytes take two and four 16-byte
/// moves (no byte stored twice).
FERRY_FORCE_INLINE inline void copy_bytes(void* dst, const void* src, std::size_t n) noexcept {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 64) std::memcpy(d, s, n);
  else if (n > 32) copy_ends<32>(d, s, n);
  else if (n >= 16) copy_ends<16>(d, s, n);
  else if (n >= 8) copy_ends<8>(d, s, n);
  else if (n >= 4) copy_ends<4>(d, s, n);
  else
    for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
}

/// Writes the first `n` elements of `r` (n <= count_of(r)) to `dst`, whose element type the
/// dtype rule has matched with r's. A gather runs the range's own code, which may throw.
template <class T, class R>
void fill(R& r, T* dst, std::size_t n) {
  if constexpr (std::ranges::contiguous_range<R>) {
    copy_bytes(dst, std::ranges::data(r), checked_bytes(n, sizeof(T), "a source"));
  } else {
    auto it = std::ranges::begin(r);
    for (std::size_t i = 0; i < n; ++i, ++it) dst[i] = static_cast<T>(*it);
  }
}

}  // namespace ferry::detail
