// ferry/pool/detail/uva_slot.hpp: one slot of a UVA pool, and the fences that guard it.
#pragma once

#include <ferry/backend/detail/fence_clock.hpp>
#include <ferry/memory/pinned_arena.hpp>

#include <cstddef>
#include <vector>

namespace ferry::detail {

/// A slot: a pinned block from the arena, its logical capacity in elements (the GrowthPolicy's
/// number, which may be below what the block could hold), and the fences of the streams that read
/// it. At most one fence per timeline is kept: within a stream a later fence covers every earlier
/// one, so recording on a stream the slot already has a fence on replaces that fence.
struct uva_slot {
  pinned_block block;
  std::size_t capacity = 0;
  std::vector<fence> fences;

  /// Room for the fences of a few streams, reserved when the slot is made (not on hot paths).
  static constexpr std::size_t reserved_fences = 4;

  void add_fence(fence f) {
    for (auto& g : fences) {
      if (g.timeline == f.timeline) {
        if (f.seq > g.seq) g = f;
        return;
      }
    }
    fences.push_back(f);
  }
};

}  // namespace ferry::detail
