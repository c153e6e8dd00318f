// ferry/policies/launch.hpp: LaunchPolicy, how a step batch submits one step's work.
#pragma once

#include <ferry/policies/detail/families.hpp>

#include <concepts>
#include <type_traits>

namespace ferry {

/// A LaunchPolicy: declares `using ferry_policy_family = ferry::families::launch;` and provides
/// `static constexpr bool replays_graph`: false when a step is submitted as one kernel launch,
/// true when it is the replay of one CUDA graph executable for every step (built once, so later
/// steps pay one graph launch whatever the number of kernels).
template <class P>
concept launch_policy = detail::models_family<P, families::launch>;

}  // namespace ferry

namespace ferry::launch {

/// A step is one kernel launch (the default).
struct kernel {
  using ferry_policy_family = families::launch;  ///< Names the LaunchPolicy family.
  static constexpr bool replays_graph = false;    ///< One kernel launch per step.
};

/// A step is the replay of the batch's one CUDA graph executable.
struct graph {
  using ferry_policy_family = families::launch;  ///< Names the LaunchPolicy family.
  static constexpr bool replays_graph = true;     ///< One graph launch per step.
};

/// A step runs inside the engine's own graph: the batch's step kernel is recorded once into a
/// stream capture the engine makes (step_batch::record), and each step is committed with no CUDA
/// call (step_batch::commit) and run by the engine's next replay (docs/step_batch.md, "Capture
/// mode").
struct capture {
  using ferry_policy_family = families::launch;  ///< Names the LaunchPolicy family.
  static constexpr bool replays_graph = true;     ///< A step is one replay (the engine's).
  static constexpr bool records_capture = true;   ///< Recorded into the engine's capture.
};

}  // namespace ferry::launch

namespace ferry::detail {
/// Whether LaunchPolicy L records its step into the engine's stream capture (launch::capture).
template <class L>
inline constexpr bool records_capture = requires { requires L::records_capture; };
}  // namespace ferry::detail

namespace ferry::families {
/// The LaunchPolicy policy family: what a policy of it names in `ferry_policy_family`.
struct launch {
  /// The policy used when none of this family is given (launch::kernel).
  using default_policy = ferry::launch::kernel;
  /// The members a policy of this family has.
  template <class P>
  static constexpr bool has_members = requires {
    requires std::same_as<std::remove_cv_t<decltype(P::replays_graph)>, bool>;
    typename std::bool_constant<P::replays_graph>;
  };
  /// Names, in a static_assert, each member a type declaring this family lacks.
  template <class P>
  static constexpr bool check() {
    static_assert(has_members<P>,
                  "ferry: a type declares the LaunchPolicy family but does not model "
                  "ferry::launch_policy: it lacks `static constexpr bool replays_graph`.");
    return launch_policy<P>;
  }
};
}  // namespace ferry::families
