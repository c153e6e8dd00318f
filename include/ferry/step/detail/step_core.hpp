// ferry/step/detail/step_core.hpp: the state of a step_batch that its handles write into: the
// declared plan, the slots (pinned table and content blocks from the arena, on the slot ring:
// memory/slot_ring.hpp), and the open step's records.
//
// Contents are bump-allocated in the slot's content block; a step that outgrows it (pow2) takes
// another block for the rest of the step, so nothing handed out moves, and the next use of the
// slot consolidates into one block of the largest step's size. Every placement is congruent to
// its destination mod 16, so the kernel copies bodies with 16-byte vectors.
#pragma once

#include <ferry/backend/detail/timeline.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/view_generation.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/slot_ring.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/staged/detail/layout.hpp>
#include <ferry/staged/detail/overlap.hpp>
#include <ferry/step/detail/plan.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class B, bool Fixed, reuse_policy Reuse>
class step_core {
 public:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  struct slot {
    pinned_block table;                // step_header + step_desc[table_cap]
    std::size_t table_cap = 0;         // descriptors
    pinned_block content;              // bump-allocated contents
    std::vector<pinned_block> extra;   // blocks taken by a step that outgrew `content`
    step_graph graph;                  // launch::graph: the slot's graph and executable
    [[no_unique_address]] slot_generation generation;  // checked views (FERRY_CHECKED_VIEWS)
  };
  struct upload_rec {
    std::uintptr_t dst;
    std::size_t elem, limit, max_n;
    std::byte* at = nullptr;  // this step's contents (host address) and bytes
    std::size_t bytes = 0, room = 0;
  };
  struct publish_rec {
    std::size_t elem, max_n;
    std::byte* at = nullptr;  // the last step's contents (host address) and elements
    std::size_t n = 0, room = 0;
  };
  struct writes_rec {
    std::uintptr_t base;
    std::size_t rows, cols, elem, max_writes, max_elements;
    overlap_tracker tracker;
    overlap_resolver resolver;
    std::vector<chunk_desc> chunks;  // dst: element of the target; src: absolute element index
    std::size_t writes = 0, elements = 0;
  };
  struct fill_rec {
    std::uintptr_t dst, src;
    std::size_t elem, bytes;
    std::size_t publish = none, index = 0;  // a source in a publish of this step, else `src`
  };

  step_core(std::size_t slots, std::size_t max_slots, int device, pinned_arena<B>& arena)
      : arena_(&arena), initial_slots_(slots), device_(device), slots_(ring_order::warmest, max_slots) {}
  step_core(const step_core&) = delete;
  step_core& operator=(const step_core&) = delete;

  // ---- the plan (before the first step) --------------------------------------------------------

  void check_planning(const char* what) const {
    if (frozen_)
      throw error(std::string("ferry: step_batch::") + what +
                  ": the plan is fixed once the first step begins (or reserve() is called); "
                  "declare every upload, publish, write target and fill before");
  }

  /// Throws std::invalid_argument when `bytes` at `at`, declared by `what` as a `kind` (a
  /// "destination" or a fill's "source"), overlap a destination declared before (or, for a
  /// destination, a fill's device source): a step's destinations are disjoint, and no step writes
  /// what a fill reads. Empty ranges overlap nothing. Setup only (it walks the whole plan).
  void check_disjoint(const char* what, const char* kind, std::uintptr_t at, std::size_t bytes) const {
    if (bytes == 0) return;
    auto clash = [&](const char* other, std::uintptr_t o, std::size_t n) {
      if (n != 0 && at < o + n && o < at + bytes) throw_overlap(what, kind, at, bytes, other, o, n);
    };
    for (const auto& u : uploads_) clash("an upload's destination", u.dst, u.limit * u.elem);
    for (const auto& w : writes_) clash("a write target", w.base, w.rows * w.cols * w.elem);
    for (const auto& f : fills_) clash("a fill's destination", f.dst, f.bytes);
    if (kind[0] == 'd')
      for (const auto& f : fills_)
        if (f.publish == none) clash("a fill's device source", f.src, f.elem);
  }

  // ---- one step --------------------------------------------------------------------------------

  void check_open(const char* what) const {
    if (!open_)
      throw error(std::string("ferry: step_batch: ") + what +
                  " outside a step; call begin() first (and submit() once the step is filled)");
  }

  /// `bytes` of contents for a destination at `dst` (0: none), placed congruent to it mod 16.
  /// Throws ferry::capacity_error (growth::fixed, arena cap) with nothing changed.
  std::byte* place(std::size_t bytes, std::uintptr_t dst) {
    const std::size_t want = static_cast<std::size_t>(dst % step_vector_bytes);
    auto offset = [&](std::size_t used) {
      const auto at = reinterpret_cast<std::uintptr_t>(base_) + used;
      return used + (want + step_vector_bytes - at % step_vector_bytes) % step_vector_bytes;
    };
    std::size_t off = offset(used_);
    if (off > room_ || bytes > room_ - off) {
      if constexpr (Fixed) {
        throw capacity_error("ferry: step_batch (growth::fixed): the step's contents exceed the "
                             "slot's " + std::to_string(room_) + " bytes");
      } else {
        const std::size_t need = checked_add<capacity_error>(bytes, step_vector_bytes, "step contents");
        const pinned_block b = arena_->acquire(std::max(need, room_));  // a power of two
        slots_[cur_].extra.push_back(b);
        base_ = b.data;
        room_ = b.capacity;
        used_ = 0;
        off = offset(0);
      }
    }
    used_ = off + bytes;
    return base_ + off;
  }

  /// The records of the open step dropped (begin() starts each step with this; cancel() ends one).
  void clear_step() noexcept {
    for (auto& u : uploads_) u = {u.dst, u.elem, u.limit, u.max_n};
    for (auto& p : publishes_) p = {p.elem, p.max_n};
    for (auto& w : writes_) {
      w.chunks.clear();
      w.tracker.reset();
      w.writes = w.elements = 0;
    }
  }

  // ---- state -----------------------------------------------------------------------------------

  pinned_arena<B>* arena_;
  std::size_t initial_slots_;
  int device_;
  std::vector<upload_rec> uploads_;
  std::vector<publish_rec> publishes_;
  std::vector<writes_rec> writes_;
  std::vector<fill_rec> fills_;
  // The slots, stamped by the step's kernel, the next submit and record_use (the ring keeps the
  // stamps, chooses the warmest free slot and waits when full).
  slot_ring<B, Reuse, slot> slots_;
  bool frozen_ = false;
  bool open_ = false;
  bool dead_ = false;  // the batch was destroyed or assigned over: its handles throw
  std::size_t cur_ = none;   // the slot of the open (or last) step
  std::size_t prev_ = none;  // the slot of the last submitted step
  bool prev_published_ = false;  // its publishes may have readers no stamp covers yet
  std::uint64_t steps_ = 0;
  // capacities wanted for every slot (fixed: the plan's bounds)
  std::size_t want_table_ = 0, want_content_ = 0;
  // the open step's bump allocation
  std::byte* base_ = nullptr;
  std::size_t room_ = 0, used_ = 0;

 private:
  static std::string range(std::uintptr_t at, std::size_t bytes) {
    char hex[2 * sizeof(std::uintptr_t)];
    const auto end = std::to_chars(hex, hex + sizeof(hex), at, 16).ptr;
    return "[0x" + std::string(hex, end) + ", +" + std::to_string(bytes) + " bytes)";
  }
  [[noreturn]] FERRY_COLD static void throw_overlap(const char* what, const char* kind, std::uintptr_t at,
                                                    std::size_t bytes, const char* other, std::uintptr_t o,
                                                    std::size_t n) {
    throw std::invalid_argument(std::string("ferry: step_batch::") + what + ": the " + kind + " " +
                                range(at, bytes) + " overlaps " + other + " " + range(o, n) +
                                " declared before; a step's destinations must be disjoint, and a fill's "
                                "source is not written by the step");
  }
};

}  // namespace ferry::detail
