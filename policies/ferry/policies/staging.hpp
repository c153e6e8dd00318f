// ferry/policies/staging.hpp: StagingPolicy, how staged contents reach the kernel.
#pragma once

#include <ferry/policies/detail/families.hpp>
#include <ferry/policies/target.hpp>

#include <concepts>
#include <cstddef>
#include <limits>
#include <type_traits>

namespace ferry {

/// A StagingPolicy: declares `using ferry_policy_family = ferry::families::staging;` and provides
/// `static constexpr std::size_t in_place_max_bytes(ferry::memory_kind target)`: for a target of
/// that kind, the apply kernel reads contents of at most this many bytes (per apply) in place
/// from pinned memory through UVA, and has larger contents copied into device scratch first
/// (0: always copied; SIZE_MAX: never). A constant expression, so that a component knows at
/// compile time whether it ever needs scratch.
template <class P>
concept staging_policy = detail::models_family<P, families::staging>;

}  // namespace ferry

namespace ferry::staging {

/// UVA-direct for a UVA target, an H2D copy for a device target (the default).
struct by_target {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
  /// Every size in place for a UVA target; every size copied for a device target.
  static constexpr std::size_t in_place_max_bytes(memory_kind target) noexcept {
    return target == memory_kind::uva ? std::numeric_limits<std::size_t>::max() : 0;
  }
};

/// The apply kernel reads the staged contents in place from pinned host memory through UVA: one
/// launch and no copy; the host-side cost is the launch alone.
struct uva_direct {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
  /// Every size in place.
  static constexpr std::size_t in_place_max_bytes(memory_kind) noexcept {
    return std::numeric_limits<std::size_t>::max();
  }
};

/// The copy engine first copies the staged contents into device scratch, then the kernel reads
/// them from device memory: one more API call, but HBM-speed reads in the kernel.
struct h2d_copy {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
  /// Every size copied.
  static constexpr std::size_t in_place_max_bytes(memory_kind) noexcept { return 0; }
};

/// UVA-direct when an apply's contents are at most Bytes, an H2D copy above: both paths are
/// compiled in and one runtime branch picks.
template <std::size_t Bytes>
struct threshold {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
  static constexpr std::size_t bytes = Bytes;  ///< The threshold, in bytes of contents per apply.
  /// Bytes, for every target.
  static constexpr std::size_t in_place_max_bytes(memory_kind) noexcept { return Bytes; }
};

}  // namespace ferry::staging

namespace ferry::families {
/// The StagingPolicy policy family: what a policy of it names in `ferry_policy_family`.
struct staging {
  /// The policy used when none of this family is given (staging::by_target).
  using default_policy = ferry::staging::by_target;
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = requires {
    { P::in_place_max_bytes(memory_kind::device) } -> std::same_as<std::size_t>;
    typename std::integral_constant<std::size_t, P::in_place_max_bytes(memory_kind::device)>;
    typename std::integral_constant<std::size_t, P::in_place_max_bytes(memory_kind::uva)>;
  };
  /// Names, in a static_assert, each member a type declaring this family lacks.
  template <class P>
  static constexpr bool check() {
    static_assert(has_members<P>,
                  "ferry: a type declares the StagingPolicy family but does not model "
                  "ferry::staging_policy: it lacks `static constexpr std::size_t "
                  "in_place_max_bytes(ferry::memory_kind target)`.");
    return staging_policy<P>;
  }
};
}  // namespace ferry::families
