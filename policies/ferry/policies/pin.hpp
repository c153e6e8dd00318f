// ferry/policies/pin.hpp: PinPolicy, what happens to a pageable (not pinned) source.
#pragma once

#include <ferry/policies/detail/families.hpp>

#include <concepts>
#include <type_traits>

namespace ferry {

/// What a transfer does with a pageable (not pinned) source.
enum class pageable_source {
  stage,          ///< Copied into a pinned arena block first, so the DMA stays asynchronous.
  reject,         ///< Does not compile: only pinned sources are accepted.
  copy_blocking,  ///< One plain copy that blocks the host until it is done (a synchronization).
};

/// A PinPolicy: declares `using ferry_policy_family = ferry::families::pin;` and provides
/// `static constexpr ferry::pageable_source pageable`, what a pageable source does. A pinned
/// source (ferry::pinned_span) is DMA'd in place under every PinPolicy.
template <class P>
concept pin_policy = detail::models_family<P, families::pin>;

}  // namespace ferry

namespace ferry::pin {

/// A pageable source is copied through the pinned arena so that the copy stays asynchronous
/// (the default).
struct stage {
  using ferry_policy_family = families::pin;  ///< Names the PinPolicy family.
  static constexpr pageable_source pageable = pageable_source::stage;  ///< Staged.
};

/// Only pinned sources (ferry::pinned_span) are accepted; a pageable source does not compile.
struct require {
  using ferry_policy_family = families::pin;  ///< Names the PinPolicy family.
  static constexpr pageable_source pageable = pageable_source::reject;  ///< Rejected.
};

/// A pageable source is copied with a plain, host-blocking copy: explicitly synchronous.
struct allow_sync {
  using ferry_policy_family = families::pin;  ///< Names the PinPolicy family.
  static constexpr pageable_source pageable = pageable_source::copy_blocking;  ///< Blocking copy.
};

}  // namespace ferry::pin

namespace ferry::families {
/// The PinPolicy policy family: what a policy of it names in `ferry_policy_family`.
struct pin {
  /// The policy used when none of this family is given (pin::stage).
  using default_policy = ferry::pin::stage;
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = requires {
    requires std::same_as<std::remove_cv_t<decltype(P::pageable)>, pageable_source>;
    typename std::integral_constant<pageable_source, P::pageable>;
  };
  /// Names, in a static_assert, each member a type declaring this family lacks.
  template <class P>
  static constexpr bool check() {
    static_assert(has_members<P>,
                  "ferry: a type declares the PinPolicy family but does not model "
                  "ferry::pin_policy: it lacks `static constexpr ferry::pageable_source "
                  "pageable`.");
    return pin_policy<P>;
  }
};
}  // namespace ferry::families
