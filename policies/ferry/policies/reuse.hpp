// ferry/policies/reuse.hpp: ReusePolicy, who guarantees a rotating slot is no longer read.
#pragma once

#include <ferry/policies/detail/families.hpp>

namespace ferry::reuse {

/// ferry fences every slot on the stream that used it and never rewrites a slot whose fence has
/// not been passed (the default).
struct event_fenced {
  using ferry_policy_family = families::reuse;  ///< Names the ReusePolicy family.
};

/// No fences: the caller guarantees that every reader of a slot is done before the slot is
/// written again (for example by synchronizing once per step).
struct caller_fenced {
  using ferry_policy_family = families::reuse;  ///< Names the ReusePolicy family.
};

}  // namespace ferry::reuse

namespace ferry::families {
/// The ReusePolicy policy family: what a tag of it names in `ferry_policy_family`.
struct reuse {
  /// The tag used when none of this family is given (reuse::event_fenced).
  using default_policy = ferry::reuse::event_fenced;
};
}  // namespace ferry::families
