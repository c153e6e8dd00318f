// ferry/step/detail/step_slots.hpp: a step_batch's slots as pinned blocks: their capacity planned
// from the declared plan (growth::fixed: the declared limits; otherwise the initial sizes, as the
// GrowthPolicy grows them), their blocks taken from the arena and grown to the largest step at
// their next use, the slot a step begins in (taken from the slot ring: memory/slot_ring.hpp), the
// table a step is encoded into, the stamps of its use, and their blocks given back.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/detail/view_generation.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/slot_ring.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/detail/step_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ferry::detail {

/// The slots of a step_batch over backend B with GrowthPolicy `Growth`, ReusePolicy `Reuse`,
/// epilogue `Epilogue` (void: none), and (`Graphs`, launch::graph on a backend with graphs) the
/// batch's one graph over a ring of tables. Under launch::kernel each slot holds its table (and,
/// on CUDA, a device lane for its launches); under launch::graph a slot holds only contents, and
/// the step's table is the ring's entry for the batch's step counter: the ring has one table per
/// slot the batch may hold (max_slots), since a step's launch is in flight only while its slot
/// is held, and launches of the one executable run in submit order. A slot is named by its index
/// in the ring (acquire()'s answer), which the caller passes back.
template <class B, class Growth, reuse_policy Reuse, class Epilogue, bool Graphs>
class step_slots {
  using ops = backend_ops<B>;

 public:
  static constexpr bool fixed = Growth::stable_addresses;
  using plan_type = step_plan<B, fixed, Epilogue>;
  using contents = step_contents<B, fixed>;

  struct slot {
    pinned_block table;                // step_header + step_desc[table_cap]
    std::size_t table_cap = 0;         // descriptors
    pinned_block content;              // bump-allocated contents (step_contents)
    std::vector<pinned_block> extra;   // blocks taken by a step that outgrew `content`
    step_lane lane;                    // CUDA, launch::kernel: the device lane of its launches
    [[no_unique_address]] slot_generation generation;  // checked views (FERRY_CHECKED_VIEWS)
  };
  using ring_type = slot_ring<B, Reuse, slot>;
  /// Whether the ring stamps slots (event_fenced, throw_when_full): a slot's readers are stamped
  /// by the next submit, so such a batch needs two slots at least.
  static constexpr bool fenced = ring_type::stamps_uses();

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

  /// `slots` (check_counts) made at reserve(), up to `max_slots`, on `device`, from `arena`, with
  /// lanes and graphs through `slot_ops`.
  step_slots(std::size_t slots, std::size_t max_slots, int device, pinned_arena<B>& arena,
             const step_slot_ops<Epilogue>& slot_ops)
      : arena_(&arena), slot_ops_(&slot_ops), initial_(slots), device_(device), ring_(ring_order::warmest, max_slots) {}
  step_slots(const step_slots&) = delete;
  step_slots& operator=(const step_slots&) = delete;

  /// Every initial slot allocated at the capacity the plan asks (launch::graph: and the graph
  /// over the ring of tables); the table capacity, or if anything throws nothing is kept.
  std::size_t reserve(const plan_type& p) {
    auto [table, content] = p.declared_capacity();
    if constexpr (!fixed) {
      table = grown_capacity<Growth>(table, 0);
      content = grown_capacity<Growth>(content, 0);
    }
    want_table_ = table;
    want_content_ = content;
    try {
      // Room for the initial slots only, as uva_pool: a slot inserted later makes its own room
      // (max_slots is a ceiling, up to SIZE_MAX: "no limit", and sizes nothing).
      ring_.reserve(initial_);
    } catch (const std::exception&) {  // std::length_error, std::bad_alloc
      want_table_ = want_content_ = 0;
      throw out_of_memory("ferry: step_batch::reserve: the host memory for " + std::to_string(initial_) +
                          " slots cannot be allocated");
    }
    try {
      // The pinned slots first: the arena (its cap, its largest block) refuses a plan no slot can
      // hold.
      for (std::size_t i = 0; i < initial_; ++i) ring_.push_back(make(p));
      if constexpr (Graphs) make_graph(p);
    } catch (...) {
      unreserve();
      throw;
    }
    return table;
  }
  /// reserve() undone (what the plan's freeze refused after it): nothing kept, a later reserve()
  /// starts over.
  void unreserve() noexcept {
    release_all();
    if constexpr (Graphs) release_graph(0);
    want_table_ = want_content_ = 0;
  }

  /// The ring's warmest free slot (while the stream keeps up, the slot of the step before the
  /// last: the host keeps writing slots that stay in its caches), else one inserted, else (the
  /// ring full) as the ReusePolicy says: a wait for the next slot, or ferry::capacity_error with
  /// nothing changed; its index. Its stamps have all passed (or caller_fenced), and the views of
  /// its last step are stale from here.
  std::size_t acquire(const plan_type& p) {
    claim c{*this, p};
    const std::size_t at = ring_.acquire(c);
    ring_[at].generation.bump();
    return at;
  }
  /// The acquired slot handed back, to be taken again by the next acquire().
  void cancel() noexcept { ring_.cancel(); }

  /// The contents of a step in slot `at` (its content block, and more as the step outgrows it).
  contents contents_of(std::size_t at) noexcept {
    slot& s = ring_[at];
    return contents(*arena_, s.content, s.extra, grows_);
  }
  /// The checked views' generation of the slot acquired last (the open or last step's, or after a
  /// cancel the step's before); null when there is none.
  [[nodiscard]] slot_generation* generation() noexcept {
    const std::size_t at = ring_.current();
    return at == ring_type::npos ? nullptr : &ring_[at].generation;
  }

  /// The descriptors the table of a step in slot `at` holds.
  [[nodiscard]] std::size_t table_capacity(std::size_t at) const noexcept {
    return Graphs ? want_table_ : ring_[at].table_cap;
  }
  /// Room for `descs` descriptors in the table of a step in slot `at`: ferry::capacity_error under
  /// growth::fixed, else the slot's table grown as the GrowthPolicy says (nothing changes if it
  /// throws; a larger table is all that stays if a later check of the step throws).
  void fit_table(std::size_t at, std::size_t descs, const plan_type& p) {
    if (descs <= table_capacity(at)) return;
    if constexpr (fixed) {
      throw capacity_error("ferry: step_batch (growth::fixed): the step needs " + std::to_string(descs) +
                           " descriptors, more than the " + std::to_string(table_capacity(at)) + " of its table");
    } else {
      slot& s = ring_[at];
      const std::size_t want = std::max(want_table_, grown_capacity<Growth>(descs, s.table_cap));
      regrow_table(s, want, p);
      want_table_ = want;
    }
  }
  /// Before the enqueue of a step of `bytes` of contents, what its commit() needs that may throw:
  /// room for the stamps, and the content capacity every slot is wanted at once it is submitted
  /// (returned, kept by commit()): growth::pow2 and user policies answer when the step outgrew the
  /// capacity; the answer is proven by taking a block of that size from the arena (given back at
  /// once, unused: the next slot that grows takes it), so that an answer no block can hold throws
  /// here (ferry::capacity_error, or ferry::out_of_memory), before anything is enqueued, instead of
  /// at every later acquire().
  [[nodiscard]] std::size_t prepare_commit(std::size_t bytes) {
    std::size_t want = want_content_;
    if constexpr (!fixed) {
      if (bytes > want_content_) [[unlikely]]
        want = grown_content(bytes);
    }
    ring_.reserve_commit();
    return want;
  }

  /// The table of the `steps`th step of the batch, in slot `at`, and the value of the device step
  /// counter it runs at: launch::graph: the ring's table for that value (the lane's count before
  /// the batch plus `steps`); launch::kernel: the slot's own table (step 0, unused).
  [[nodiscard]] std::pair<std::byte*, std::uint64_t> table_of(std::size_t at, std::uint64_t steps) noexcept {
    if constexpr (Graphs) {
      const std::uint64_t step = lane_.step + steps;
      return {tables_.data + (step % ring_.max_slots()) * table_stride_, step};
    } else {
      return {ring_[at].table.data, 0};
    }
  }
  /// launch::kernel: the device lane of slot `at`'s launches.
  [[nodiscard]] const step_lane& lane_of(std::size_t at) const noexcept { return ring_[at].lane; }
  /// launch::graph: the batch's graph.
  [[nodiscard]] const step_graph& graph() const noexcept { return graph_; }
  /// launch::graph and launch::capture: where the kernel finds the ring of tables and the batch's
  /// lane, and `status` (launch::capture's report, mapped).
  [[nodiscard]] step_locator locator(std::uintptr_t status = 0) const noexcept {
    return {reinterpret_cast<std::uintptr_t>(ops::mapped(tables_.data)), table_stride_, ring_.max_slots(),
            lane_.address, status};
  }
  /// The batch lane's step counter where the batch began (launch::graph, launch::capture).
  [[nodiscard]] std::uint64_t first_step() const noexcept { return lane_.step; }

  /// The step in the acquired slot enqueued, its kernel's mark `done`: it stamps the slot, and the
  /// previous step's slot when that published (the readers of its publishes are work enqueued on
  /// the stream before this step's kernel); a step that `published` nothing has no readers, and
  /// its slot is free once its own kernel has run, so the host may prepare a step while the one
  /// before runs. Every slot is wanted at `want_content` bytes of contents from now on
  /// (prepare_commit's answer). Room reserved: no allocation, no throw.
  void commit(const stamp& done, bool published, std::size_t want_content) noexcept {
    ring_.commit(done, published ? after_use::view : after_use::open);
    want_content_ = want_content;
  }
  /// Work enqueued on `s` so far reads the last submitted step's publishes: its slot is stamped
  /// as the ReusePolicy asks.
  void record_use(stream_ref<B> s) { ring_.record_use(s); }
  /// The acquired slot's step was enqueued but could not be stamped: its slot, and the previous
  /// step's when it published (whose readers on the stream this stamp would have covered), leave
  /// the ring without being released (slot_ring::abandon): their blocks are leaked, never
  /// rewritten under a reader (launch::graph: with the tables and lane).
  void abandon() noexcept {
    ring_.abandon();
    leaked_ = true;
  }

  /// Every slot given back once its stamps have passed. Closing is a use of every slot: the last
  /// step's publishes may have readers that no stamp covers (the next submit would have stamped
  /// them): the ring synchronizes the device first (slot_ring::release), which needs no stream
  /// that may be gone by now; past the wait bound, that step's slot is leaked (launch::graph:
  /// with the tables and lane its step may still use). `steps`: the batch's submitted steps;
  /// whether nothing was leaked.
  bool close(std::uint64_t steps) noexcept {
    release_all();
    if constexpr (Graphs) release_graph(steps);
    return !leaked_;
  }

  [[nodiscard]] std::size_t size() const noexcept { return ring_.size(); }
  [[nodiscard]] std::size_t max_slots() const noexcept { return ring_.max_slots(); }
  [[nodiscard]] ring_counts counts() const noexcept { return ring_.counts(); }
  /// Blocks grown or added (step_batch::stats().grows).
  [[nodiscard]] std::uint64_t grows() const noexcept { return grows_; }
  /// The table capacity every slot is wanted at (launch::capture records its grid with it).
  [[nodiscard]] std::size_t table_wanted() const noexcept { return want_table_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:

  /// What acquire() asks of the ring (slot_ring::acquire's hooks): a slot at the wanted capacities.
  struct claim {
    step_slots& k;
    const plan_type& p;
    slot make() { return k.make(p); }
    void fit([[maybe_unused]] slot& s) {
      if constexpr (!fixed) k.fit(s, p);
    }
    // The full ring's message (event_fenced waits instead: the host runs at most max_slots - 1
    // steps ahead).
    std::string describe(std::size_t next) const {
      const stamp held = k.ring_.stamps(next).template held<B>();
      return "ferry: step_batch: the next slot (slot " + std::to_string(next) +
             ") is still in use (its step or the readers of its publishes)" +
             (held.empty() ? std::string()
                           : " until stream point (line " + std::to_string(held.line) + ", seq " +
                                 std::to_string(held.seq) + ")") +
             " and the batch holds max_slots (" + std::to_string(k.ring_.max_slots()) +
             ") slots; use more slots, or let the stream catch up";
    }
  };

  /// A new slot at the wanted capacities (launch::kernel: with its table and lane); nothing is
  /// kept if it throws.
  slot make(const plan_type& p) {
    slot s;
    try {
      if constexpr (!Graphs) {
        s.table = arena_->acquire(p.table_bytes(want_table_));
        s.table_cap = want_table_;
        p.init_table(s.table.data, s.table_cap);
        s.lane = slot_ops_->take_lane(device_);
      }
      s.content = arena_->acquire(want_content_);
    } catch (...) {
      release(s);
      throw;
    }
    return s;
  }

  /// launch::graph: the ring of tables (one per slot the batch may hold), the batch's lane and its
  /// one graph over them; release_graph() gives back what was made if it throws.
  void make_graph(const plan_type& p) {
    const std::size_t count = ring_.max_slots();
    table_stride_ = round_up(p.table_bytes(want_table_), 64);
    tables_ = arena_->acquire(checked_bytes<capacity_error>(count, table_stride_, "step_batch's tables"));
    for (std::size_t i = 0; i < count; ++i) p.init_table(tables_.data + i * table_stride_, want_table_);
    lane_ = slot_ops_->take_lane(device_);
    graph_ = slot_ops_->make_graph(locator(), want_table_, device_, p.epilogue());
  }

  /// growth::pow2: a slot coming into use takes the sizes of the largest step so far, in one block
  /// (its blocks have all passed: released at once).
  void fit(slot& s, const plan_type& p) {
    if (s.table_cap < want_table_) {
      regrow_table(s, want_table_, p);
      ++grows_;
    }
    if (s.content.capacity < want_content_ || !s.extra.empty()) {
      if (s.content.capacity < want_content_) ++grows_;
      const pinned_block b = arena_->acquire(std::max(want_content_, s.content.capacity));
      arena_->release(s.content);
      for (const auto& e : s.extra) arena_->release(e);
      s.extra.clear();
      s.content = b;
    }
  }
  /// The slot's table at `descs` descriptors; nothing changes if it throws.
  void regrow_table(slot& s, std::size_t descs, const plan_type& p) {
    const pinned_block b = arena_->acquire(p.table_bytes(descs));
    p.init_table(b.data, descs);
    arena_->release(s.table);
    s.table = b;
    s.table_cap = descs;
  }

  FERRY_COLD std::size_t grown_content(std::size_t bytes) const {
    const std::size_t want = std::max(want_content_, grown_capacity<Growth>(bytes, want_content_));
    try {
      arena_->release(arena_->acquire(want));
    } catch (const capacity_error& e) {
      throw capacity_error("ferry: step_batch::submit: the GrowthPolicy's capacity_for(" + std::to_string(bytes) +
                           ", " + std::to_string(want_content_) + ") answered " + std::to_string(want) +
                           " bytes, which no pinned block can hold (" + e.what() + ")");
    }
    return want;
  }

  /// Gives a slot's blocks (and lane) back; the ring calls it once the slot's stamps have passed
  /// (a slot whose readers could not be waited for is leaked, never reused under a reader).
  void release(slot& s) noexcept {
    destructor_guard([&] {
      if (s.lane.address) slot_ops_->give_lane(device_, s.lane);
      if (s.table) arena_->release(s.table);
      if (s.content) arena_->release(s.content);
      for (const auto& e : s.extra) arena_->release(e);
    });
    s = {};
  }
  void release_all() noexcept {
    if (!ring_.release(device_, [&](slot& s) { release(s); })) leaked_ = true;
  }
  /// launch::graph: the graph destroyed, and (unless a launch may still use them) the tables and
  /// lane given back, the lane's step counter where the batch's `steps` submits left it.
  void release_graph(std::uint64_t steps) noexcept {
    destructor_guard([&] {
      slot_ops_->destroy_graph(graph_);
      graph_ = {};
      if (leaked_) return;
      if (lane_.address) slot_ops_->give_lane(device_, {lane_.address, lane_.step + steps});
      if (tables_) arena_->release(tables_);
    });
    lane_ = {};
    tables_ = {};
  }

  pinned_arena<B>* arena_;
  const step_slot_ops<Epilogue>* slot_ops_;  // step_ops<B>'s, taken by the batch's constructor
  std::size_t initial_;
  int device_;
  // The slots, stamped by the step's kernel, the next submit and record_use (the ring keeps the
  // stamps, chooses the warmest free slot and waits when full).
  ring_type ring_;
  // capacities wanted for every slot (fixed: the plan's bounds)
  std::size_t want_table_ = 0, want_content_ = 0;
  std::uint64_t grows_ = 0;
  // CUDA: launch::graph's ring of tables (one per step in flight, indexed by the step counter) and
  // the batch's lane and graph; launch::kernel: each slot's lane.
  pinned_block tables_;
  std::size_t table_stride_ = 0;
  step_lane lane_;
  step_graph graph_;
  bool leaked_ = false;  // a slot or table may still be read by a launch: keep the lane and tables
};

}  // namespace ferry::detail
