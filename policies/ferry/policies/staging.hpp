// ferry/policies/staging.hpp: StagingPolicy, how staged contents reach the kernel.
#pragma once

#include <ferry/policies/detail/families.hpp>

#include <cstddef>

namespace ferry::staging {

/// UVA-direct for a UVA target, an H2D copy for a device target (the default).
struct by_target {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
};

/// The apply kernel reads the staged contents in place from pinned host memory through UVA: one
/// launch and no copy; the host-side cost is the launch alone.
struct uva_direct {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
};

/// The copy engine first copies the staged contents into device scratch, then the kernel reads
/// them from device memory: one more API call, but HBM-speed reads in the kernel.
struct h2d_copy {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
};

/// UVA-direct when an apply's contents are at most Bytes, an H2D copy above: both paths are
/// compiled in and one runtime branch picks.
template <std::size_t Bytes>
struct threshold {
  using ferry_policy_family = families::staging;  ///< Names the StagingPolicy family.
  static constexpr std::size_t bytes = Bytes;  ///< The threshold, in bytes of contents per apply.
};

}  // namespace ferry::staging

namespace ferry::families {
/// The StagingPolicy policy family: what a tag of it names in `ferry_policy_family`.
struct staging {
  /// The tag used when none of this family is given (staging::by_target).
  using default_policy = ferry::staging::by_target;
};
}  // namespace ferry::families
