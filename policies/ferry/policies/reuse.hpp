// ferry/policies/reuse.hpp: ReusePolicy, who guarantees a rotating slot is no longer read.
#pragma once

#include <ferry/policies/detail/families.hpp>

#include <concepts>
#include <type_traits>

namespace ferry {

/// A ReusePolicy: declares `using ferry_policy_family = ferry::families::reuse;` and provides
/// `static constexpr bool ferry_fences`: true when ferry stamps every slot (or block, or host
/// array) with the point of the stream that used it and never rewrites it before the stream has
/// passed that point; false when the caller guarantees it (ferry records and checks nothing).
template <class P>
concept reuse_policy = detail::models_family<P, families::reuse>;

}  // namespace ferry

namespace ferry::reuse {

/// ferry fences every slot on the stream that used it and never rewrites a slot whose fence has
/// not been passed (the default).
struct event_fenced {
  using ferry_policy_family = families::reuse;  ///< Names the ReusePolicy family.
  static constexpr bool ferry_fences = true;     ///< ferry fences.
};

/// No fences: the caller guarantees that every reader of a slot is done before the slot is
/// written again (for example by synchronizing once per step).
struct caller_fenced {
  using ferry_policy_family = families::reuse;  ///< Names the ReusePolicy family.
  static constexpr bool ferry_fences = false;    ///< The caller fences.
};

}  // namespace ferry::reuse

namespace ferry::families {
/// The ReusePolicy policy family: what a policy of it names in `ferry_policy_family`.
struct reuse {
  /// The policy used when none of this family is given (reuse::event_fenced).
  using default_policy = ferry::reuse::event_fenced;
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = requires {
    requires std::same_as<std::remove_cv_t<decltype(P::ferry_fences)>, bool>;
    typename std::bool_constant<P::ferry_fences>;
  };
  /// Names, in a static_assert, each member a type declaring this family lacks.
  template <class P>
  static constexpr bool check() {
    static_assert(has_members<P>,
                  "ferry: a type declares the ReusePolicy family but does not model "
                  "ferry::reuse_policy: it lacks `static constexpr bool ferry_fences`.");
    return reuse_policy<P>;
  }
};
}  // namespace ferry::families
