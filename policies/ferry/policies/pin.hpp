// ferry/policies/pin.hpp: PinPolicy, what happens to a pageable (not pinned) source.
#pragma once

#include <ferry/policies/detail/families.hpp>

namespace ferry::pin {

/// A pageable source is copied through the pinned arena so that the copy stays asynchronous
/// (the default).
struct stage {
  using ferry_policy_family = families::pin;  ///< Names the PinPolicy family.
};

/// Only pinned sources (ferry::pinned_span) are accepted; a pageable source does not compile.
struct require {
  using ferry_policy_family = families::pin;  ///< Names the PinPolicy family.
};

/// A pageable source is copied with a plain, host-blocking copy: explicitly synchronous.
struct allow_sync {
  using ferry_policy_family = families::pin;  ///< Names the PinPolicy family.
};

}  // namespace ferry::pin

namespace ferry::families {
/// The PinPolicy policy family: what a tag of it names in `ferry_policy_family`.
struct pin {
  /// The tag used when none of this family is given (pin::stage).
  using default_policy = ferry::pin::stage;
};
}  // namespace ferry::families
