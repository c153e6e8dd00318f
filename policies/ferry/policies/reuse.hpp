// ferry/policies/reuse.hpp: ReusePolicy, who guarantees a rotating slot is no longer read.
#pragma once

#include <ferry/error.hpp>
#include <ferry/policies/detail/families.hpp>

#include <chrono>
#include <concepts>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ferry {

/// A ReusePolicy: declares `using ferry_policy_family = ferry::families::reuse;` and provides
/// `static constexpr bool ferry_fences`: true when ferry stamps every slot (or block, or host
/// array) with the point of the stream that used it and never rewrites it before the stream has
/// passed that point; false when the caller guarantees it (ferry records and checks nothing).
///
/// Optionally, a fencing policy says what a full ring does: `static void when_full(wait,
/// describe)` is called when the slot a ring needs next is still in use and the ring already
/// holds `max_slots` slots; `wait()` blocks until that slot is free (a synchronization), and
/// `describe()` returns a std::string naming the ring, the slot and the point it waits for. A
/// policy without the member waits (reuse::event_fenced's behaviour).
///
/// Optionally, a fencing policy bounds its waits: `static std::chrono::nanoseconds
/// wait_timeout()` (any std::chrono::duration that converts to nanoseconds exactly, positive) is
/// how long a full ring's wait, and the waits of the component's destructor, may take. A policy
/// without the member takes the process-wide bound, ferry::wait_timeout() (5 minutes unless
/// ferry::set_wait_timeout or FERRY_WAIT_TIMEOUT say otherwise). Past it, `wait()` throws
/// ferry::timeout_error naming the slot and the stream point, and the ring is unchanged.
template <class P>
concept reuse_policy = detail::models_family<P, families::reuse>;

}  // namespace ferry

namespace ferry::reuse {

/// ferry fences every slot on the stream that used it and never rewrites a slot whose fence has
/// not been passed (the default).
struct event_fenced {
  using ferry_policy_family = families::reuse;  ///< Names the ReusePolicy family.
  static constexpr bool ferry_fences = true;     ///< ferry fences.
  /// A full ring waits for the slot it needs next (back-pressure: the host runs at most
  /// `max_slots - 1` steps ahead of the GPU, as a CUDA stream's own queue makes it wait). The
  /// wait is a synchronization: backend_stats_of counts it, and so does sync_guard, so a
  /// zero-sync proof still sees it.
  template <class Wait, class Describe>
  static void when_full(Wait&& wait, Describe&& /*describe*/) {
    std::forward<Wait>(wait)();
  }
};

/// As event_fenced, except that a full ring throws ferry::capacity_error (naming the ring, the
/// slot in use and the point it waits for) instead of waiting: for an engine that must never
/// block its host thread, and sizes max_slots to its steps in flight.
struct throw_when_full {
  using ferry_policy_family = families::reuse;  ///< Names the ReusePolicy family.
  static constexpr bool ferry_fences = true;     ///< ferry fences.
  /// A full ring throws ferry::capacity_error with `describe()`.
  template <class Wait, class Describe>
  static void when_full(Wait&& /*wait*/, Describe&& describe) {
    throw capacity_error(std::string(std::forward<Describe>(describe)()));
  }
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

namespace ferry::detail {

/// The bound of the waits of a ring under ReusePolicy P: P::wait_timeout(), else 0 (the
/// process-wide bound). A wait_timeout() that is not positive: std::invalid_argument.
template <reuse_policy P>
std::chrono::nanoseconds reuse_wait_bound() {
  if constexpr (requires { P::wait_timeout(); }) {
    static_assert(std::is_convertible_v<decltype(P::wait_timeout()), std::chrono::nanoseconds>,
                  "ferry: a ReusePolicy's wait_timeout() returns a std::chrono::duration that converts "
                  "to std::chrono::nanoseconds exactly (e.g. std::chrono::seconds).");
    const std::chrono::nanoseconds bound = P::wait_timeout();
    if (bound.count() <= 0)
      throw std::invalid_argument("ferry: the ReusePolicy's wait_timeout() is " + std::to_string(bound.count()) +
                                  " ns; a bound must be positive");
    return bound;
  } else {
    return std::chrono::nanoseconds(0);
  }
}

/// What a full ring does under ReusePolicy P (see ferry::reuse_policy): P::when_full, or wait.
/// A when_full that returns without calling wait() leaves the ring as full as it was: that is a
/// ferry::capacity_error too (the ring never grows beyond max_slots).
template <reuse_policy P, class Wait, class Describe>
void ring_full(Wait&& wait, Describe&& describe) {
  bool waited = false;
  auto wait_once = [&] {
    if (!waited) wait();
    waited = true;
  };
  if constexpr (requires { P::when_full(wait_once, describe); }) {
    P::when_full(wait_once, describe);
    if (!waited)
      throw capacity_error(std::string(describe()) +
                           " (the ReusePolicy's when_full returned without waiting)");
  } else {
    wait_once();
  }
}

}  // namespace ferry::detail
