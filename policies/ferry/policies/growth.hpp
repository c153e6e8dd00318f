// ferry/policies/growth.hpp: GrowthPolicy, how staging capacity follows demand.
#pragma once

#include <ferry/error.hpp>
#include <ferry/policies/detail/families.hpp>

#include <bit>
#include <concepts>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>

namespace ferry {

/// A GrowthPolicy: declares `using ferry_policy_family = ferry::families::growth;` and provides
///  - `static std::size_t capacity_for(std::size_t needed, std::size_t current)`: the capacity to
///    grow to when `needed` (elements or bytes) exceeds the `current` capacity; at least `needed`
///    (components throw ferry::error otherwise), or throws ferry::capacity_error;
///  - `static constexpr bool stable_addresses`: true when capacity never changes after
///    construction or `reserve()` (a request beyond it throws ferry::capacity_error instead), so
///    addresses stay valid for CUDA graphs.
template <class P>
concept growth_policy = detail::models_family<P, families::growth>;

}  // namespace ferry

namespace ferry::growth {

/// Capacity grows to the next power of two at or above the request (1→1, 5→8, 1024→1024,
/// 1025→2048) and never shrinks (the default).
struct pow2 {
  using ferry_policy_family = families::growth;  ///< Names the GrowthPolicy family.
  static constexpr bool stable_addresses = false;  ///< Grows: addresses may change.
  /// The next power of two at or above n (1 for n == 0). Throws ferry::capacity_error when no
  /// power of two in size_t holds n (n > 2^63 on 64 bits).
  static constexpr std::size_t capacity_for(std::size_t n) {
    constexpr std::size_t largest = std::size_t{1} << (std::numeric_limits<std::size_t>::digits - 1);
    if (n > largest)
      throw capacity_error("ferry: growth::pow2 has no power-of-two capacity for " +
                           std::to_string(n) + " (the largest is " + std::to_string(largest) + ")");
    return n <= 1 ? 1 : std::bit_ceil(n);
  }
  /// The next power of two at or above `needed`, whatever the current capacity.
  static constexpr std::size_t capacity_for(std::size_t needed, std::size_t /*current*/) {
    return capacity_for(needed);
  }
};

/// Capacity never changes after construction or reserve(): addresses stay stable (graph-safe),
/// and a request beyond the capacity throws ferry::capacity_error.
struct fixed {
  using ferry_policy_family = families::growth;  ///< Names the GrowthPolicy family.
  static constexpr bool stable_addresses = true;  ///< Never grows after construction or reserve().
  /// Exactly what construction or reserve() asks for.
  static constexpr std::size_t capacity_for(std::size_t needed, std::size_t /*current*/) noexcept {
    return needed;
  }
};

}  // namespace ferry::growth

namespace ferry::families {
/// The GrowthPolicy policy family: what a policy of it names in `ferry_policy_family`.
struct growth {
  /// The policy used when none of this family is given (growth::pow2).
  using default_policy = ferry::growth::pow2;
  /// P has `capacity_for(needed, current)`.
  template <class P>
  static constexpr bool has_capacity_for = requires(std::size_t needed, std::size_t current) {
    { P::capacity_for(needed, current) } -> std::same_as<std::size_t>;
  };
  /// P has `stable_addresses`.
  template <class P>
  static constexpr bool has_stable_addresses = requires {
    requires std::same_as<std::remove_cv_t<decltype(P::stable_addresses)>, bool>;
    typename std::bool_constant<P::stable_addresses>;
  };
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = has_capacity_for<P> && has_stable_addresses<P>;
  /// Names, in a static_assert, each member a type declaring this family lacks.
  template <class P>
  static constexpr bool check() {
    static_assert(has_capacity_for<P>,
                  "ferry: a type declares the GrowthPolicy family but does not model "
                  "ferry::growth_policy: it lacks `static std::size_t capacity_for(std::size_t "
                  "needed, std::size_t current)`.");
    static_assert(has_stable_addresses<P>,
                  "ferry: a type declares the GrowthPolicy family but does not model "
                  "ferry::growth_policy: it lacks `static constexpr bool stable_addresses`.");
    return growth_policy<P>;
  }
};
}  // namespace ferry::families

namespace ferry::detail {

/// G::capacity_for(needed, current), checked to hold `needed`: a policy that returns less would
/// have ferry write past the end of what it allocated.
template <growth_policy G>
std::size_t grown_capacity(std::size_t needed, std::size_t current) {
  const std::size_t c = G::capacity_for(needed, current);
  if (c < needed)
    throw error("ferry: the GrowthPolicy's capacity_for(" + std::to_string(needed) + ", " +
                std::to_string(current) + ") returned " + std::to_string(c) +
                ", less than the capacity needed");
  return c;
}

}  // namespace ferry::detail
