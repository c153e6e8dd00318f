// ferry/pool/detail/uva_slot.hpp: one slot of a UVA pool, and the stamps that guard it.
#pragma once

#include <ferry/backend/detail/timeline.hpp>
#include <ferry/detail/view_generation.hpp>
#include <ferry/memory/pinned_arena.hpp>

#include <cstddef>
#include <vector>

namespace ferry::detail {

/// A slot: a pinned block from the arena, its logical capacity in elements (the GrowthPolicy's
/// number, which may be below what the block could hold), and the stamps (points on the reuse
/// core's lines) of the streams that read it. At most one stamp per line is kept: within a line a
/// later point covers every earlier one, so stamping a line the slot already has replaces it.
struct uva_slot {
  pinned_block block;
  std::size_t capacity = 0;
  std::vector<stamp> stamps;
  [[no_unique_address]] slot_generation generation;  // checked views (FERRY_CHECKED_VIEWS)

  /// Room for the stamps of a few streams, reserved when the slot is made (not on hot paths).
  static constexpr std::size_t reserved_stamps = 4;

  void add_stamp(stamp p) {
    for (auto& q : stamps) {
      if (q.line == p.line) {
        if (p.seq > q.seq) q = p;
        return;
      }
    }
    stamps.push_back(p);
  }
};

}  // namespace ferry::detail
