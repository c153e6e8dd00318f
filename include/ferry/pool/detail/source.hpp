// ferry/pool/detail/source.hpp: what a pool accepts as a source range (read with
// detail/source_range.hpp's count_of and fill).
#pragma once

#include <ferry/detail/source_range.hpp>
#include <ferry/element.hpp>

#include <ranges>

namespace ferry::detail {

template <class R>
inline constexpr bool is_pool_source =
    std::ranges::input_range<R> && countable_source<R>;

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

}  // namespace ferry::detail
