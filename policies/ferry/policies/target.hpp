// ferry/policies/target.hpp: TargetKind, where a staged-write tensor's data lives.
#pragma once

#include <ferry/policies/detail/families.hpp>

#include <concepts>
#include <type_traits>

namespace ferry {

/// Where a target's elements live.
enum class memory_kind {
  device,  ///< Device memory: kernels read it at HBM speed; the host reads it back by a copy.
  uva,     ///< Pinned, mapped host memory: kernels read and write it through UVA.
};

/// A TargetKind: declares `using ferry_policy_family = ferry::families::target_kind;` and
/// provides `static constexpr ferry::memory_kind memory`, where the target lives. Optionally,
/// `static constexpr ferry::memory_kind without_live_mapping`: where it lives instead on a device
/// whose mapping of pinned memory ferry's probe finds dead (kernels do not see the host's writes
/// through it: Confidential Computing, WSL2), chosen at construction. Without it, a target of
/// `memory_kind::uva` on such a device throws ferry::error at construction.
template <class P>
concept target_kind = detail::models_family<P, families::target_kind>;

}  // namespace ferry

namespace ferry::target {

/// The target lives in device memory (the default): kernels read it at HBM speed.
struct device {
  using ferry_policy_family = families::target_kind;  ///< Names the TargetKind family.
  static constexpr memory_kind memory = memory_kind::device;  ///< Device memory.
};

/// The target lives in pinned, mapped host memory that kernels read and write through UVA: the
/// host can read it without a copy, kernels pay PCIe latency on every access.
struct uva {
  using ferry_policy_family = families::target_kind;  ///< Names the TargetKind family.
  static constexpr memory_kind memory = memory_kind::uva;  ///< Pinned, mapped host memory.
};

/// The target lives in pinned, mapped host memory (as target::uva) where the device's mapping is
/// live, and in device memory otherwise (as target::device: every apply then copies its contents
/// and chunk table H2D, never reading pinned memory in place): chosen once, at construction, from
/// ferry's mapping probe, so that one build runs on machines whose mapping is not live
/// (Confidential Computing, WSL2). A tensor's `memory()` says which was chosen.
struct uva_or_device {
  using ferry_policy_family = families::target_kind;  ///< Names the TargetKind family.
  static constexpr memory_kind memory = memory_kind::uva;  ///< Where the mapping is live.
  static constexpr memory_kind without_live_mapping = memory_kind::device;  ///< Where it is not.
};

}  // namespace ferry::target

namespace ferry::families {
/// The TargetKind policy family: what a policy of it names in `ferry_policy_family`.
struct target_kind {
  /// The policy used when none of this family is given (target::device).
  using default_policy = ferry::target::device;
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = requires {
    requires std::same_as<std::remove_cv_t<decltype(P::memory)>, memory_kind>;
    typename std::integral_constant<memory_kind, P::memory>;
  };
  /// Names, in a static_assert, each member a type declaring this family lacks.
  template <class P>
  static constexpr bool check() {
    static_assert(has_members<P>,
                  "ferry: a type declares the TargetKind family but does not model "
                  "ferry::target_kind: it lacks `static constexpr ferry::memory_kind memory`.");
    return ferry::target_kind<P>;
  }
};
}  // namespace ferry::families

namespace ferry::detail {
/// Where a target of TargetKind P lives on a device whose mapping is not live: P's
/// `without_live_mapping`, else P::memory.
template <class P>
constexpr memory_kind target_without_live_mapping() noexcept {
  if constexpr (requires { P::without_live_mapping; }) {
    static_assert(std::is_same_v<std::remove_cv_t<decltype(P::without_live_mapping)>, memory_kind>,
                  "ferry: a TargetKind's without_live_mapping is a `static constexpr ferry::memory_kind`.");
    return P::without_live_mapping;
  } else {
    return P::memory;
  }
}
}  // namespace ferry::detail
