// ferry/step/detail/step_slots.hpp: a step_batch's slots as pinned blocks: their capacity planned
// from the declared plan (growth::fixed: the declared limits; otherwise the initial sizes, as the
// GrowthPolicy grows them), their blocks taken from the arena and grown to the largest step at
// their next use, the slot a step begins in (taken from the slot ring: memory/slot_ring.hpp), and
// their blocks given back.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/detail/step_core.hpp>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace ferry::detail {

/// The slots of a step_batch over backend B with GrowthPolicy `Growth`, ReusePolicy `Reuse`,
/// epilogue `Epilogue` (void: none), and (`Graphs`, launch::graph on a backend with graphs) the
/// batch's one graph over a ring of tables. Under launch::kernel each slot holds its table (and,
/// on CUDA, a device lane for its launches); under launch::graph a slot holds only contents, and
/// the step's table is the ring's entry for the batch's step counter: the ring has one table per
/// slot the batch may hold (max_slots), since a step's launch is in flight only while its slot
/// is held, and launches of the one executable run in submit order.
template <class B, class Growth, reuse_policy Reuse, class Epilogue, bool Graphs>
struct step_slots {
  using growth = Growth;
  static constexpr bool fixed = Growth::stable_addresses;
  static constexpr bool graphs = Graphs;
  using core = step_core<B, fixed, Reuse, Epilogue>;
  using slot = typename core::slot;
  using ops = backend_ops<B>;
  static constexpr std::size_t none = core::none;
  /// Whether the ring stamps slots (event_fenced, throw_when_full): a slot's readers are stamped
  /// by the next submit, so such a batch needs two slots at least.
  static constexpr bool fenced = decltype(core::slots_)::stamps_uses();

  /// The constructor's checks: std::invalid_argument on bad slot counts.
  static void check_counts(std::size_t slots, std::size_t max_slots) {
    if (slots < (fenced ? 2u : 1u))
      throw std::invalid_argument(std::string("ferry: step_batch needs at least ") +
                                  (fenced ? "2 slots under reuse::event_fenced" : "1 slot") +
                                  " (slots == " + std::to_string(slots) + ")");
    if (slots > max_slots)
      throw std::invalid_argument("ferry: step_batch slots (" + std::to_string(slots) +
                                  ") exceeds max_slots (" + std::to_string(max_slots) + ")");
  }

  /// The plan's capacity (step_core::declared_capacity): the limits under growth::fixed, the
  /// initial sizes, as the GrowthPolicy grows them, otherwise.
  static std::pair<std::size_t, std::size_t> planned_capacity(const core& k) {
    auto [descs, bytes] = k.declared_capacity();
    if constexpr (!fixed) {
      descs = grown_capacity<Growth>(descs, 0);
      bytes = grown_capacity<Growth>(bytes, 0);
    }
    return {descs, bytes};
  }

  /// reserve(): the plan fixed and every initial slot allocated at its capacity (and each write
  /// target's host memory); if anything throws, the plan is not fixed and nothing is kept.
  static void reserve(core& k) {
    if (k.frozen_) return;
    const auto [table, content] = planned_capacity(k);
    k.want_table_ = table;
    k.want_content_ = content;
    try {
      // Room for the initial slots only, as uva_pool: a slot inserted later makes its own room
      // (max_slots is a ceiling, up to SIZE_MAX: "no limit", and sizes nothing).
      k.slots_.reserve(k.initial_slots_);
    } catch (const std::exception&) {  // std::length_error, std::bad_alloc
      k.want_table_ = k.want_content_ = 0;
      throw out_of_memory("ferry: step_batch::reserve: the host memory for " + std::to_string(k.initial_slots_) +
                          " slots cannot be allocated");
    }
    try {
      // The pinned slots first: the arena (its cap, its largest block) refuses a plan no slot can
      // hold. Only then each target's host memory, bounded by the descriptors a slot now holds.
      for (std::size_t i = 0; i < k.initial_slots_; ++i) k.slots_.push_back(make(k));
      if constexpr (Graphs) make_graph(k);
      for (auto& w : k.writes_) k.reserve_writes(w, table, "step_batch::reserve");
    } catch (...) {
      release_all(k);  // the plan is not fixed: a later reserve() or begin() starts over
      if constexpr (Graphs) release_graph(k);
      k.want_table_ = k.want_content_ = 0;
      throw;
    }
    k.frozen_ = true;
  }

  /// begin(): ferry::error while a step is open; the plan reserved (reserve()); then the ring's
  /// warmest free slot (while the stream keeps up, the slot of the step before the last: the host
  /// keeps writing slots that stay in its caches), else one inserted, else (the ring full) as the
  /// ReusePolicy says: a wait for the next slot, or ferry::capacity_error with nothing changed.
  /// The slot taken is the open step's, emptied.
  static void begin_step(core& k) {
    if (k.open_)
      throw error("ferry: step_batch::begin: the step begun before was neither submitted nor cancelled");
    reserve(k);
    claim c{k};
    const std::size_t at = k.slots_.acquire(c);  // its stamps have all passed (or caller_fenced)
    auto& s = k.slots_[at];
    s.generation.bump();  // the views of its last step are stale from here
    k.base_ = s.content.data;
    k.room_ = s.content.capacity;
    k.used_ = 0;
    k.clear_step();
    k.open_ = true;
  }

  /// cancel(): the open step's records dropped and its slot handed back to the ring, to be taken
  /// again by the next begin(); outside a step nothing happens.
  static void cancel_step(core& k) noexcept {
    if (!k.open_) return;
    k.clear_step();
    k.slots_.cancel();
    k.open_ = false;
  }

  /// What begin() asks of the ring (slot_ring::acquire's hooks): a slot at the wanted capacities.
  struct claim {
    core& k;
    slot make() { return step_slots::make(k); }
    void fit([[maybe_unused]] slot& s) {
      if constexpr (!fixed) step_slots::fit(k, s);
    }
    // The full ring's message (event_fenced waits instead: the host runs at most max_slots - 1
    // steps ahead).
    std::string describe(std::size_t next) const {
      const stamp held = k.slots_.stamps(next).template held<B>();
      return "ferry: step_batch: the next slot (slot " + std::to_string(next) +
             ") is still in use (its step or the readers of its publishes)" +
             (held.empty() ? std::string()
                           : " until stream point (line " + std::to_string(held.line) + ", seq " +
                                 std::to_string(held.seq) + ")") +
             " and the batch holds max_slots (" + std::to_string(k.slots_.max_slots()) +
             ") slots; use more slots, or let the stream catch up";
    }
  };

  /// A new slot at the wanted capacities (launch::kernel: with its table and lane); nothing is
  /// kept if it throws.
  static slot make(core& k) {
    slot s;
    try {
      if constexpr (!Graphs) {
        s.table = k.arena_->acquire(k.table_bytes(k.want_table_));
        s.table_cap = k.want_table_;
        k.init_table(s.table.data, s.table_cap);
        s.lane = k.slot_ops_->take_lane(k.device_);
      }
      s.content = k.arena_->acquire(k.want_content_);
    } catch (...) {
      release(k, s);
      throw;
    }
    return s;
  }

  /// launch::graph: the ring of tables (one per slot the batch may hold), the batch's lane and its
  /// one graph over them; release_graph() gives back what was made if it throws.
  static void make_graph(core& k) {
    const std::size_t count = k.slots_.max_slots();
    k.table_stride_ = round_up(k.table_bytes(k.want_table_), 64);
    k.tables_ = k.arena_->acquire(checked_bytes<capacity_error>(count, k.table_stride_, "step_batch's tables"));
    for (std::size_t i = 0; i < count; ++i) k.init_table(k.tables_.data + i * k.table_stride_, k.want_table_);
    k.lane_ = k.slot_ops_->take_lane(k.device_);
    const step_locator at{reinterpret_cast<std::uintptr_t>(ops::mapped(k.tables_.data)), k.table_stride_, count,
                          k.lane_.address};
    k.graph_ = k.slot_ops_->make_graph(at, k.want_table_, k.device_, &k.epilogue_);
  }
  /// The open step's table, and in `step` the value of the device step counter it runs at:
  /// launch::graph: the ring's table for that value (the lane's count before the batch plus its
  /// submits); launch::kernel: the slot's own table (`step` 0, unused).
  static std::byte* table_of(core& k, slot& s, std::uint64_t& step) noexcept {
    if constexpr (Graphs) {
      step = k.lane_.step + k.steps_;
      return k.tables_.data + (step % k.slots_.max_slots()) * k.table_stride_;
    } else {
      step = 0;
      return s.table.data;
    }
  }
  /// The descriptors a step's table holds.
  static std::size_t table_capacity(const core& k, const slot& s) noexcept {
    return Graphs ? k.want_table_ : s.table_cap;
  }

  /// growth::pow2: a slot coming into use takes the sizes of the largest step so far, in one block
  /// (its blocks have all passed: released at once).
  static void fit(core& k, slot& s) {
    if (s.table_cap < k.want_table_) {
      regrow_table(k, s, k.want_table_);
      ++k.grows_;
    }
    if (s.content.capacity < k.want_content_ || !s.extra.empty()) {
      if (s.content.capacity < k.want_content_) ++k.grows_;
      const pinned_block b = k.arena_->acquire(std::max(k.want_content_, s.content.capacity));
      k.arena_->release(s.content);
      for (const auto& e : s.extra) k.arena_->release(e);
      s.extra.clear();
      s.content = b;
    }
  }
  /// The slot's table at `descs` descriptors; nothing changes if it throws.
  static void regrow_table(core& k, slot& s, std::size_t descs) {
    const pinned_block b = k.arena_->acquire(k.table_bytes(descs));
    k.init_table(b.data, descs);
    k.arena_->release(s.table);
    s.table = b;
    s.table_cap = descs;
  }

  /// growth::pow2 and user policies: the content capacity every slot is wanted at once a step of
  /// `bytes` outgrew it, as the GrowthPolicy answers; the answer is proven by taking a block of
  /// that size from the arena (given back at once, unused: the next slot that grows takes it), so
  /// that an answer no block can hold throws here (ferry::capacity_error, or
  /// ferry::out_of_memory), before anything is enqueued, instead of at every later begin().
  FERRY_COLD static std::size_t grown_content(core& k, std::size_t bytes) {
    const std::size_t want = std::max(k.want_content_, grown_capacity<Growth>(bytes, k.want_content_));
    try {
      k.arena_->release(k.arena_->acquire(want));
    } catch (const capacity_error& e) {
      throw capacity_error("ferry: step_batch::submit: the GrowthPolicy's capacity_for(" + std::to_string(bytes) +
                           ", " + std::to_string(k.want_content_) + ") answered " + std::to_string(want) +
                           " bytes, which no pinned block can hold (" + e.what() + ")");
    }
    return want;
  }

  /// Gives a slot's blocks (and graph) back; the ring calls it once the slot's stamps have passed
  /// (a slot whose readers could not be waited for is leaked, never reused under a reader).
  static void release(core& k, slot& s) noexcept {
    auto& arena = *k.arena_;
    destructor_guard([&] {
      if (s.lane.address) k.slot_ops_->give_lane(k.device_, s.lane);
      if (s.table) arena.release(s.table);
      if (s.content) arena.release(s.content);
      for (const auto& e : s.extra) arena.release(e);
    });
    s = {};
  }
  /// Gives every slot back once its stamps have passed (slot_ring::release); a slot that cannot
  /// be waited for is leaked, and with it (launch::graph) the tables and lane its step may still
  /// use.
  static void release_all(core& k) noexcept {
    if (!k.slots_.release(k.device_, [&](slot& s) { release(k, s); })) k.leaked_ = true;
  }
  /// launch::graph: the graph destroyed, and (unless a launch may still use them) the tables and
  /// lane given back, the lane's step counter where the batch's submits left it.
  static void release_graph(core& k) noexcept {
    destructor_guard([&] {
      k.slot_ops_->destroy_graph(k.graph_);
      k.graph_ = {};
      if (k.leaked_) return;
      if (k.lane_.address) k.slot_ops_->give_lane(k.device_, {k.lane_.address, k.lane_.step + k.steps_});
      if (k.tables_) k.arena_->release(k.tables_);
    });
    k.lane_ = {};
    k.tables_ = {};
  }

  /// The batch's end (destruction, or an assignment over it): its handles end, its open step is
  /// dropped, and every slot is given back. Destruction is a use of every slot: the last step's
  /// publishes may have readers that no stamp covers (the next submit would have stamped them):
  /// the ring synchronizes the device first (slot_ring::release), which needs no stream that may
  /// be gone by now; past the wait bound, that step's slot is leaked.
  static void close(core& k) noexcept {
    k.dead_ = true;
    k.open_ = false;
    release_all(k);
    if constexpr (Graphs) release_graph(k);
  }
};

}  // namespace ferry::detail
