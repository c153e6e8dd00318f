// ferry/policies/launch.hpp: LaunchPolicy, how a step_batch submits a step.
#pragma once

#include <ferry/policies/detail/families.hpp>

namespace ferry::launch {

/// Every submit is one kernel launch that reads the step from its pinned slot (the default).
struct kernel {
  using ferry_policy_family = families::launch;  ///< Names the LaunchPolicy family.
  static constexpr bool replays_graph = false;   ///< Submits launch the kernel directly.
};

/// Every submit replays the CUDA graph of its slot (one executable per slot, instantiated once
/// over the slot's fixed address; its kernel reads the step's work count from the slot). Needs
/// growth::fixed (presets::graph_safe). The host backend runs the same plan as a host task.
struct graph {
  using ferry_policy_family = families::launch;  ///< Names the LaunchPolicy family.
  static constexpr bool replays_graph = true;    ///< Submits replay a graph per slot.
};

}  // namespace ferry::launch

namespace ferry::families {
/// The LaunchPolicy policy family: what a tag of it names in `ferry_policy_family`.
struct launch {
  /// The tag used when none of this family is given (launch::kernel).
  using default_policy = ferry::launch::kernel;
};
}  // namespace ferry::families
