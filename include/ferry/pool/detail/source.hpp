// ferry/pool/detail/source.hpp: what a pool accepts as a source range, its size, and the write
// of its elements into a slot (memcpy when contiguous, a gather otherwise).
#pragma once

#include <ferry/element.hpp>

#include <cstddef>
#include <cstring>
#include <iterator>
#include <ranges>
#include <type_traits>

namespace ferry::detail {

template <class R>
inline constexpr bool is_pool_source =
    std::ranges::input_range<R> && (std::ranges::sized_range<R> || std::ranges::forward_range<R>);

/// The static checks of a pool source: a range whose size is known before it is read (sized, or
/// multi-pass so that it can be measured), of the destination's element type (dtype rule).
template <class R, class T>
constexpr void check_pool_source() {
  static_assert(is_pool_source<R>,
                "ferry: a pool source must be a std::ranges input range whose size is known before "
                "it is read (a sized range or a forward range); copy a single-pass range into a "
                "container first.");
  if constexpr (is_pool_source<R>) check_same_element<std::ranges::range_value_t<R>, T>();
}

template <class R>
std::size_t source_size(R& src) {
  if constexpr (std::ranges::sized_range<R>)
    return static_cast<std::size_t>(std::ranges::size(src));
  else
    return static_cast<std::size_t>(std::ranges::distance(src));
}

/// Writes the n elements of `src` to `dst`: one memcpy for a contiguous range, a gather (element
/// by element, through the range's iterators) otherwise. A gather may throw (the range's own
/// code); the caller keeps the pool unchanged in that case.
template <class T, class R>
void write_source(T* dst, R& src, std::size_t n) {
  using V = std::ranges::range_value_t<R>;
  if constexpr (std::ranges::contiguous_range<R> && sizeof(V) == sizeof(T)) {
    if (n != 0) std::memcpy(static_cast<void*>(dst), static_cast<const void*>(std::ranges::data(src)), n * sizeof(T));
  } else {
    std::size_t i = 0;
    for (auto it = std::ranges::begin(src); i < n; ++it, ++i) dst[i] = static_cast<T>(*it);
  }
}

}  // namespace ferry::detail
