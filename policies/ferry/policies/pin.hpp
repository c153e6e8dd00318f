// ferry/policies/pin.hpp: PinPolicy, what happens to a pageable (not pinned) source.
#pragma once

#include <ferry/policies/detail/families.hpp>

namespace ferry::pin {

/// A pageable source is copied through the pinned arena so that the copy stays asynchronous
/// (the default).
struct stage {
  using ferry_policy_family = families::pin;
};

/// Only pinned sources (ferry::pinned_span) are accepted; a pageable source does not compile.
struct require {
  using ferry_policy_family = families::pin;
};

/// A pageable source is copied with a plain, host-blocking copy: explicitly synchronous.
struct allow_sync {
  using ferry_policy_family = families::pin;
};

}  // namespace ferry::pin

namespace ferry::families {
struct pin {
  using default_policy = ferry::pin::stage;
};
}  // namespace ferry::families
