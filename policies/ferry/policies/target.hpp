// ferry/policies/target.hpp: TargetKind, where a staged-write tensor's data lives.
#pragma once

#include <ferry/policies/detail/families.hpp>

namespace ferry::target {

/// The target lives in device memory (the default): kernels read it at HBM speed.
struct device {
  using ferry_policy_family = families::target_kind;  ///< Names the TargetKind family.
};

/// The target lives in pinned, mapped host memory that kernels read and write through UVA: the
/// host can read it without a copy, kernels pay PCIe latency on every access.
struct uva {
  using ferry_policy_family = families::target_kind;  ///< Names the TargetKind family.
};

}  // namespace ferry::target

namespace ferry::families {
/// The TargetKind policy family: what a tag of it names in `ferry_policy_family`.
struct target_kind {
  /// The tag used when none of this family is given (target::device).
  using default_policy = ferry::target::device;
};
}  // namespace ferry::families
