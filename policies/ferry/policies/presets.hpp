// ferry/policies/presets.hpp: named policy bundles. A tag given next to a preset overrides the
// preset's member of that family; members of families a component does not use are ignored.
// The measured reasons for each choice: docs/policies.md.
#pragma once

#include <ferry/policies/detail/families.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/policies/staging.hpp>
#include <ferry/policies/target.hpp>

namespace ferry::presets {

/// A block table: a large device-resident table updated by small scattered appends. Device target
/// (kernels read it every step at HBM speed), contents read in place through UVA (one launch, no
/// copy), pow2 growth, event-fenced reuse.
struct block_table {
  /// The tags of this preset.
  using ferry_policy_bundle =
      detail::type_list<target::device, staging::uva_direct, growth::pow2, reuse::event_fenced>;
};

/// Small per-request state that kernels read in place and the host reads back without a copy: a
/// UVA target (pinned, mapped host memory).
struct uva_state {
  /// The tags of this preset.
  using ferry_policy_bundle = detail::type_list<target::uva>;
};

/// Stable addresses for CUDA graphs that read ferry buffers: fixed growth, so nothing is ever
/// reallocated after construction or reserve(); an oversized request throws instead.
struct graph_safe {
  /// The tags of this preset.
  using ferry_policy_bundle = detail::type_list<growth::fixed>;
};

}  // namespace ferry::presets
