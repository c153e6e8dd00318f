// ferry/policies/growth.hpp: GrowthPolicy, how staging capacity follows demand.
#pragma once

#include <ferry/error.hpp>
#include <ferry/policies/detail/families.hpp>

#include <bit>
#include <cstddef>
#include <limits>
#include <string>

namespace ferry::growth {

/// Capacity grows to the next power of two at or above the request (1→1, 5→8, 1024→1024,
/// 1025→2048) and never shrinks (the default).
struct pow2 {
  using ferry_policy_family = families::growth;  ///< Names the GrowthPolicy family.
  /// The capacity for a request of `n`: the next power of two at or above n (1 for n == 0).
  /// Throws ferry::capacity_error when no power of two in size_t holds n (n > 2^63 on 64 bits).
  static constexpr std::size_t capacity_for(std::size_t n) {
    constexpr std::size_t largest = std::size_t{1} << (std::numeric_limits<std::size_t>::digits - 1);
    if (n > largest)
      throw capacity_error("ferry: growth::pow2 has no power-of-two capacity for " +
                           std::to_string(n) + " (the largest is " + std::to_string(largest) + ")");
    return n <= 1 ? 1 : std::bit_ceil(n);
  }
};

/// Capacity never changes after construction or reserve(): addresses stay stable (graph-safe),
/// and a request beyond the capacity throws ferry::capacity_error.
struct fixed {
  using ferry_policy_family = families::growth;  ///< Names the GrowthPolicy family.
};

}  // namespace ferry::growth

namespace ferry::families {
/// The GrowthPolicy policy family: what a tag of it names in `ferry_policy_family`.
struct growth {
  /// The tag used when none of this family is given (growth::pow2).
  using default_policy = ferry::growth::pow2;
};
}  // namespace ferry::families
