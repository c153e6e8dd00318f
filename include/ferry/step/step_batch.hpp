// ferry/step/step_batch.hpp: step_batch<Policies...>, a whole engine step (packed uploads, UVA
// publishes, staged writes into any number of targets, device-side fills) gathered into one
// pinned slot and submitted as one kernel launch or one graph replay.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/detail/source_range.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/staged_view.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/launch.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/staged/staged_write_tensor.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/detail/step_core.hpp>

#if defined(__CUDACC__)
#include <ferry/step/detail/step_kernel.cuh>
#endif

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ferry {

/// A whole engine step in one launch. At setup an engine declares what every step moves:
/// `add_upload` (a packed array into a device buffer), `add_publish` (an array that kernels read
/// in place through UVA), `add_writes` (staged row-segment writes into a 2-D target: a
/// staged_write_tensor or any device matrix view, of any element type) and `add_fill` (a device
/// destination filled from a device value). Every step then: `begin()` takes the next pinned
/// slot; the handles write the step's host data straight into it (`span(n)`, `stage_write`);
/// `submit(stream)` enqueues ONE kernel launch (launch::kernel) or ONE graph replay (launch::graph)
/// that reads the descriptors and contents through UVA and does all of it, then records its own
/// completion for ferry's reuse core as its last act (no event record, no query in steady state).
/// Under launch::graph an engine may replay the step inside its own graph instead:
/// `submit_with(stream, launch)` hands it the slot's step graph to hold as a child node.
/// The host backend runs the same plan as one host task, with identical results.
///
/// Policies (any order, each family at most once): GrowthPolicy (`growth::pow2` default: a step
/// larger than its slot takes more arena memory for that step, and every slot grows to the
/// largest step at its next use; `growth::fixed`: the declared maxima are the capacity, beyond
/// them ferry::capacity_error and nothing is recorded), ReusePolicy (`reuse::event_fenced`
/// default; `reuse::throw_when_full`; `reuse::caller_fenced`), LaunchPolicy (`launch::kernel` default; `launch::graph`,
/// which needs growth::fixed: presets::graph_safe), Backend; and the presets.
///
/// **Rules.** Destinations of one step are disjoint, except writes into one target: of two
/// writes that overlap, the one staged later wins. A fill's source must not be written by the
/// same step (it may be an element of this step's publish). Both are checked at setup: an add_*
/// call whose destination (or fill source) overlaps one declared before throws
/// std::invalid_argument naming both byte ranges. Uploads and writes land in memory
/// the engine owns; a published view lives in the slot: **it stays valid for work enqueued on the
/// submit's stream before the next submit** (work on another stream: record_use(stream) before
/// the next submit). Under event_fenced a slot is rewritten only once its kernel and the readers
/// of its publishes have passed; when the next slot is still in use, begin() takes the one after
/// it if that is free, else inserts a new slot (up to max_slots) without blocking; when the batch
/// already holds max_slots, the ring is full and the ReusePolicy decides: `reuse::event_fenced`
/// waits for the next slot to pass (back-pressure: the host runs at most max_slots - 1 steps
/// ahead; the wait is a synchronization, counted in backend_stats_of and by sync_guard),
/// `reuse::throw_when_full` throws ferry::capacity_error. While the stream keeps up, begin() takes the slot of
/// the step before the last once it has passed, so that the host writes into warm memory.
/// Under caller_fenced nothing is checked: the caller makes sure a slot's step and readers are
/// done `slots` steps later.
///
/// **Capture safety.** begin(), cancel(), the handles' calls, reserve() and the add_* calls touch no stream
/// and may run while a stream captures; submit(), submit_with() and record_use() throw
/// ferry::error on a capturing stream (the graph a replay uses is ferry's own, one per slot).
///
/// Handles are small values that share the batch's state; they stay valid while it lives (moves
/// included); once it is destroyed or assigned over, each of their calls throws ferry::error, as
/// on an empty handle. Destruction waits for the batch's kernels and for the readers of the last step's
/// publishes (the device, as freeing memory does: their streams may be gone). Move-only; not
/// thread-safe.
template <class... Policies>
class step_batch {
  using policies = detail::policies<
      detail::type_list<families::growth, families::reuse, families::launch, families::backend>,
      Policies...>;

 public:
  using backend_type = typename policies::backend;        ///< The backend (Backend policy).
  using growth_policy = typename policies::growth;        ///< Slot growth (GrowthPolicy).
  using reuse_policy = typename policies::reuse;          ///< Who fences slots (ReusePolicy).
  using launch_policy = typename policies::launch;        ///< How a step is submitted.

 private:
  using B = backend_type;
  using ops = detail::backend_ops<B>;
  using step_ops = detail::step_ops<B>;
  static constexpr bool fixed = growth_policy::stable_addresses;
  static constexpr bool graphs = launch_policy::replays_graph && step_ops::graphs;
  static_assert(!launch_policy::replays_graph || fixed,
                "ferry: launch::graph replays a graph over fixed slot addresses and needs "
                "growth::fixed (presets::graph_safe)");
  using core = detail::step_core<B, fixed, reuse_policy>;
  static constexpr bool fenced = decltype(core::slots_)::stamps_uses();
  static constexpr std::size_t none = core::none;

 public:
  /// The default ceiling on slots.
  static constexpr std::size_t default_max_slots = 8;

  // ---- handles ---------------------------------------------------------------------------------

  /// What every handle holds: a share of the batch's state (which moves with the batch, and
  /// outlives it while a handle holds it, so that a stale handle is caught, never a read of freed
  /// memory) and its index there.
  class handle {
   protected:
    handle() = default;
    /// Entry `i` of the plan in `c`.
    handle(std::shared_ptr<core> c, std::size_t i) : core_(std::move(c)), i_(i) {}
    /// The batch's state; ferry::error for an empty (default-constructed) `kind` handle, or one
    /// whose batch was destroyed or assigned over.
    core& c(const char* kind) const {
      if (!core_ || core_->dead_) [[unlikely]]
        throw_unusable(kind);
      return *core_;
    }
    /// Throws the ferry::error of an unusable `kind` handle: empty, or its batch assigned over or
    /// destroyed.
    [[noreturn]] FERRY_COLD void throw_unusable(const char* kind) const {
      if (!core_) throw error(std::string("ferry: use of an empty step_batch::") + kind + " handle");
      throw error(std::string("ferry: use of a step_batch::") + kind +
                  " handle whose batch was assigned over or destroyed (a move keeps handles valid; "
                  "an assignment over a batch, or its destruction, ends its handles)");
    }
    std::shared_ptr<core> core_;  ///< The batch's state (null: an empty handle).
    std::size_t i_ = 0;           ///< The entry in the state's list of this kind of handle.
    friend class step_batch;
  };

  /// A packed upload into a device buffer: each step, `span(n)` is where the host writes the
  /// first n elements of the destination (pinned slot memory); the submit copies them.
  template <class T>
  class upload : public handle {
    using handle::c, handle::core_, handle::i_;

   public:
    upload() = default;
    /// This step's n elements for destination[0, n), uninitialized: write every one of them
    /// before submit(). A second call in one step replaces the first. n > destination().size():
    /// std::out_of_range; growth::fixed and n > the declared max_n: ferry::capacity_error
    /// (nothing changes either way).
    [[nodiscard]] std::span<T> span(std::size_t n) {
      return {reinterpret_cast<T*>(c("upload").upload_span(i_, n, sizeof(T))), n};
    }
    /// The device buffer this upload fills. ferry::error for an empty handle or one whose batch
    /// was assigned over or destroyed.
    [[nodiscard]] device_span<T> destination() const {
      const auto& r = c("upload").uploads_[i_];
      return {reinterpret_cast<T*>(r.dst), r.limit};
    }

   private:
    friend class step_batch;
    using handle::handle;
  };

  /// A UVA publish: each step, `span(n)` is where the host writes n elements (pinned slot
  /// memory); `view()` is what kernels read in place, with no copy (see the class's lifetime rule).
  template <class T>
  class publish : public handle {
    using handle::c, handle::core_, handle::i_;

   public:
    publish() = default;
    /// This step's n elements, uninitialized: write every one before submit(). A second call in
    /// one step replaces the first. growth::fixed and n > the declared max_n:
    /// ferry::capacity_error (nothing changes).
    [[nodiscard]] std::span<T> span(std::size_t n) {
      return {reinterpret_cast<T*>(c("publish").publish_span(i_, n, sizeof(T))), n};
    }
    /// The kernel-readable view of the last span() of the current (or last submitted) step;
    /// empty before the step's span() call and after cancel(). ferry::error for an empty handle
    /// or one whose batch was assigned over or destroyed.
    [[nodiscard]] device_span<const T> view() const {
      core& k = c("publish");
      const auto& r = k.publishes_[i_];
      const device_span<const T> v(static_cast<const T*>(ops::mapped(r.at)), r.n);
#if FERRY_CHECKED_VIEWS
      if (r.n != 0 && k.cur_ != none) return detail::stamp_view(v, k.slots_[k.cur_].generation, "step_batch");
#endif
      return v;
    }

   private:
    friend class step_batch;
    using handle::handle;
  };

  /// Staged writes into one rows x cols target, as staged_write_tensor's: each is recorded
  /// straight into the slot and applied by the step's submit.
  template <class T>
  class writes : public handle {
    using handle::c, handle::core_, handle::i_;

   public:
    writes() = default;
    /// Records a write of the elements of `range` to [row][start, start + n). Checks first, even
    /// for an empty range: row < rows(), start <= cols(), n <= cols() - start; otherwise
    /// std::out_of_range naming them, and nothing is recorded. The element type must be T's
    /// (ferry's dtype rule). growth::fixed: beyond the declared max_writes / max_elements,
    /// ferry::capacity_error, nothing recorded. The range is consumed when this returns.
    template <std::ranges::input_range R>
      requires(std::ranges::sized_range<R> || std::ranges::forward_range<R>)
    void stage_write(std::size_t row, std::size_t start, R&& range) {
      detail::check_same_element<std::ranges::range_value_t<R>, T>();
      stage(row, start, range);
    }
    /// stage_write(row, start, {a, b, c}).
    void stage_write(std::size_t row, std::size_t start, std::initializer_list<T> values) {
      stage(row, start, std::span<const T>(values.begin(), values.size()));
    }
    /// A one-element write of `value` at [row][0] (ferry's scalar rule).
    template <class V>
    void stage_write_elem(std::size_t row, V value) {
      detail::check_scalar<V, T>();
      const T v = static_cast<T>(value);
      stage(row, 0, std::span<const T>(&v, 1));
    }
    /// Writes recorded in the open step (empty writes are not recorded). These four counts are 0
    /// for an empty handle; ferry::error for one whose batch was assigned over or destroyed.
    [[nodiscard]] std::size_t pending() const { return core_ ? c("writes").writes_[i_].writes : 0; }
    /// Elements recorded in the open step.
    [[nodiscard]] std::size_t pending_elements() const {
      return core_ ? c("writes").writes_[i_].elements : 0;
    }
    /// The target's rows.
    [[nodiscard]] std::size_t rows() const { return core_ ? c("writes").writes_[i_].rec.rows() : 0; }
    /// The target's columns.
    [[nodiscard]] std::size_t cols() const { return core_ ? c("writes").writes_[i_].rec.cols() : 0; }

   private:
    friend class step_batch;
    using handle::handle;

    template <class R>
    void stage(std::size_t row, std::size_t start, R&& src) {
      c("writes").template stage_write<T>(i_, row, start, src);
    }
  };

  // ---- construction ----------------------------------------------------------------------------

  /// A batch of `slots` slots (at least 2 under event_fenced: a slot's readers are stamped by the
  /// next submit), up to `max_slots`, from ferry::default_arena<B>(). Slots are allocated by
  /// reserve() or the first begin(); begin() inserts one while the stream is behind, up to
  /// max_slots (with its graph under launch::graph; max_slots == slots: a ring that allocates
  /// nothing after reserve()). Throws std::invalid_argument on bad counts.
  explicit step_batch(std::size_t slots = 2, std::size_t max_slots = default_max_slots)
      : step_batch(slots, max_slots, default_arena<B>()) {}
  /// The same, with blocks from `arena` (which must outlive the batch).
  step_batch(std::size_t slots, std::size_t max_slots, pinned_arena<B>& arena) {
    if (slots < (fenced ? 2u : 1u))
      throw std::invalid_argument(std::string("ferry: step_batch needs at least ") +
                                  (fenced ? "2 slots under reuse::event_fenced" : "1 slot") +
                                  " (slots == " + std::to_string(slots) + ")");
    if (slots > max_slots)
      throw std::invalid_argument("ferry: step_batch slots (" + std::to_string(slots) +
                                  ") exceeds max_slots (" + std::to_string(max_slots) + ")");
    core_ = std::make_shared<core>(slots, max_slots, ops::current_device(), arena);
    step_ops::preload();
  }
  /// Takes over `o`'s slots and plan; handles and views handed out by `o` stay valid (they refer
  /// to the plan, which moves as a whole); `o` is left empty.
  step_batch(step_batch&& o) noexcept = default;
  /// Releases this batch (as the destructor does: its open step is dropped, and its handles end:
  /// each of their calls throws ferry::error), then takes `o`'s plan, slots and handles, which stay
  /// valid.
  step_batch& operator=(step_batch&& o) noexcept {
    if (this != &o) {
      release_all();
      core_ = std::move(o.core_);
    }
    return *this;
  }
  /// Waits for the batch's kernels and for the readers of the last step's publishes, then gives
  /// every block back to the arena. Its handles end (each of their calls throws ferry::error).
  ~step_batch() { release_all(); }

  // ---- the plan --------------------------------------------------------------------------------

  /// Declares a packed upload of up to `max_n` elements into `dst` per step (max_n <= dst.size(),
  /// else std::invalid_argument; under growth::fixed max_n is the limit, under pow2 a hint).
  template <class T>
  [[nodiscard]] upload<T> add_upload(device_span<T> dst, std::size_t max_n) {
    static_assert((detail::check_element<T>(), true));
    return upload<T>(core_, c().add_upload(reinterpret_cast<std::uintptr_t>(dst.data()), sizeof(T), dst.size(), max_n));
  }

  /// Declares a UVA publish of up to `max_n` elements per step (fixed: the limit; pow2: a hint).
  template <class T>
  [[nodiscard]] publish<T> add_publish(std::size_t max_n) {
    static_assert((detail::check_element<T>(), true));
    return publish<T>(core_, c().add_publish(sizeof(T), max_n));
  }

  /// Declares staged writes into the rows x cols target `target` (device memory or UVA), of up to
  /// `max_writes` writes of `max_elements` elements in all per step (fixed: the limits; pow2:
  /// hints).
  template <class T>
  [[nodiscard]] writes<T> add_writes(staged_view<T> target, std::size_t max_writes = 0, std::size_t max_elements = 0) {
    static_assert((detail::check_element<T>(), true));
    return writes<T>(core_, c().add_writes(reinterpret_cast<std::uintptr_t>(target.data_handle()), target.extent(0),
                                           target.extent(1), sizeof(T), max_writes, max_elements));
  }
  /// add_writes(tensor.view(), ...): writes into a staged_write_tensor's target (its own staged
  /// writes are independent of these; work on one stream applies both in stream order).
  template <class T, class... Ps>
  [[nodiscard]] writes<T> add_writes(staged_write_tensor<T, Ps...>& tensor, std::size_t max_writes = 0,
                       std::size_t max_elements = 0) {
    static_assert(std::is_same_v<typename staged_write_tensor<T, Ps...>::backend_type, B>,
                  "ferry: step_batch::add_writes: the tensor's backend differs from the batch's");
    return add_writes<T>(tensor.view(), max_writes, max_elements);
  }

  /// Declares a fill, every step, of every element of `dst` with the value at `device_value`
  /// (device memory or UVA, read by the step's kernel: never by the host; no destination of the
  /// plan may cover it).
  template <class T>
  void add_fill(device_span<T> dst, const T* device_value) {
    static_assert((detail::check_element<T>(), true));
    c().add_fill(reinterpret_cast<std::uintptr_t>(dst.data()), dst.size_bytes(),
                 reinterpret_cast<std::uintptr_t>(device_value), sizeof(T), none, 0);
  }
  /// Declares a fill, every step, of every element of `dst` with element `index` of this step's
  /// `src` publish (its span() call must cover index, else submit throws std::out_of_range).
  template <class T>
  void add_fill(device_span<T> dst, const publish<T>& src, std::size_t index) {
    if (src.core_ != core_)
      throw std::invalid_argument("ferry: step_batch::add_fill: a publish of another batch");
    c().add_fill(reinterpret_cast<std::uintptr_t>(dst.data()), dst.size_bytes(), 0, sizeof(T), src.i_, index);
  }

  /// Fixes the plan and allocates every slot now at its declared capacity (growth::fixed: the
  /// capacity; launch::graph: also instantiates each slot's graph), so that steady state
  /// allocates nothing. The first begin() does this when not called. Not a hot path.
  void reserve() {
    core& k = c();
    if (k.frozen_) return;
    const auto [table, content] = planned_capacity();
    k.want_table_ = table;
    k.want_content_ = content;
    k.slots_.reserve(k.slots_.max_slots());
    try {
      // The pinned slots first: the arena (its cap, its largest block) refuses a plan no slot can
      // hold. Only then each target's host memory, bounded by the descriptors a slot now holds.
      for (std::size_t i = 0; i < k.initial_slots_; ++i) k.slots_.push_back(make_slot());
      for (auto& w : k.writes_) k.reserve_writes(w, table, "step_batch::reserve");
    } catch (...) {
      release_all_slots();  // the plan is not fixed: a later reserve() or begin() starts over
      k.want_table_ = k.want_content_ = 0;
      throw;
    }
    k.frozen_ = true;
  }

  // ---- a step ----------------------------------------------------------------------------------

  /// Starts a step in the next slot. Under event_fenced a slot still in use (its kernel or the
  /// readers of its publishes) is never rewritten: the slot after it is taken if free, else a new
  /// slot is inserted (up to max_slots; sized to the largest step so far, or to the plan under
  /// growth::fixed); with max_slots reached the ring is full: event_fenced blocks until the next
  /// slot has passed (a synchronization, counted by sync_guard), throw_when_full throws
  /// ferry::capacity_error naming the slot and the stream point it waits for, with nothing
  /// changed. Throws ferry::error when the step begun before was neither submitted nor
  /// cancelled. Blocks only on a full ring; never touches a stream.
  void begin() {
    core& k = c();
    if (k.open_)
      throw error("ferry: step_batch::begin: the step begun before was neither submitted nor cancelled");
    reserve();
    // The ring offers the warmest free slot (while the stream keeps up, the slot of the step before
    // the last: the host keeps writing slots that stay in its caches), else inserts one.
    auto& ring = k.slots_;
    std::size_t next = ring.choose();
    if (next == none && ring.full()) {
      // The ring is full: the ReusePolicy says what happens, waiting for the slot coming into use
      // (event_fenced, back-pressure: the host runs at most max_slots - 1 steps ahead) or throwing
      // (throw_when_full). Nothing has changed yet either way.
      next = ring.next();
      ring.when_full(next, [&] {
        const detail::stamp held = ring.stamps(next).template held<B>();
        return "ferry: step_batch: the next slot (slot " + std::to_string(next) +
               ") is still in use (its step or the readers of its publishes)" +
               (held.empty() ? std::string()
                             : " until stream point (line " + std::to_string(held.line) + ", seq " +
                                   std::to_string(held.seq) + ")") +
               " and the batch holds max_slots (" + std::to_string(ring.max_slots()) +
               ") slots; use more slots, or let the stream catch up";
      });
    }
    if (next == none) {
      ring.reserve_for_one();
      next = ring.insert(make_slot());
      if (k.prev_ != none && k.prev_ >= next) ++k.prev_;
    } else if constexpr (!fixed) {
      fit(ring[next]);
    }
    ring.take(next);  // its stamps have all passed (or caller_fenced)
    auto& s = ring[next];
    s.generation.bump();  // the views of its last step are stale from here
    k.cur_ = next;
    k.base_ = s.content.data;
    k.room_ = s.content.capacity;
    k.used_ = 0;
    k.clear_step();
    k.open_ = true;
  }

  /// Drops the open step: what its handles recorded is gone (pending() is 0, a publish's view()
  /// is empty), nothing is enqueued, and its slot is taken again by the next begin() as if this
  /// step had not begun. Touches no stream (capture-safe); outside a step it does nothing. The
  /// way out of a step that submit() refused and that the engine will not fix.
  void cancel() {
    core& k = c();
    if (!k.open_) return;
    k.clear_step();
    k.cur_ = k.prev_;
    if (k.prev_ == none) k.slots_.reset_current(); else k.slots_.rotate_to(k.prev_);
    k.open_ = false;
  }

  /// Submits the open step on `s`: ONE kernel launch (launch::kernel) or graph replay
  /// (launch::graph) that performs every upload, write and fill of the step, reading them from
  /// the slot through UVA, and stamps the slot (and the previous step's slot, whose publishes'
  /// readers on `s` it follows) for the reuse core. Never synchronizes. Throws ferry::error
  /// outside a step, on a stream of another device or one that is capturing; std::out_of_range
  /// for a fill from an element its publish does not hold this step; ferry::capacity_error when
  /// growth::fixed is exceeded or the GrowthPolicy refuses the step's size (it throws, or answers
  /// more than a pinned block holds). Whatever throws has enqueued nothing and leaves the step open
  /// and its data as they were: fix it and submit again, or cancel().
  FERRY_KERNEL_VISIBILITY void submit(stream_ref<B> s) {
    submit_by(s, [&](typename core::slot& sl, const void* table, std::size_t blocks) {
      if constexpr (graphs)
        step_ops::replay(s, sl.graph);
      else
        step_ops::launch(s, table, blocks);
    });
  }

#if FERRY_HAS_CUDA
  /// launch::graph on CUDA: the step graph as a child of the engine's own graph. Submits the open
  /// step as submit() does, except that the replay is the engine's: `launch(step_graph)` is
  /// called once with the slot's graph (a cudaGraph_t with the step's one kernel node; each slot
  /// has its own, fixed for the batch's life) and must enqueue on `s` one launch of an executable
  /// graph that the engine built with that graph as a child node (cudaGraphAddChildGraphNode),
  /// or throw having enqueued nothing (the step then stays open). Nodes that read the step's
  /// uploads, writes or fills depend on the child node; nodes anywhere in that graph may read the
  /// step's publishes (the next submit stamps them, as for readers on `s`), at the addresses they
  /// were built with: a slot places a step's contents at the same addresses whenever the step
  /// asks for the same sizes in the same order. An engine keeps one
  /// executable per slot graph it is given (a slot inserted while the stream is behind brings a
  /// new one; `max_slots == slots` keeps the set fixed). `launch` runs while ferry's reuse core
  /// holds its lock, so that no other point of `s` is made between: it must not call ferry.
  /// Errors as submit().
  template <class Launch>
    requires(graphs && std::invocable<Launch&, cudaGraph_t>)
  FERRY_KERNEL_VISIBILITY void submit_with(stream_ref<B> s, Launch&& launch) {
    submit_by(s, [&](typename core::slot& sl, const void*, std::size_t) {
      launch(static_cast<cudaGraph_t>(sl.graph.graph));
    });
  }
#endif

  /// Declares that work enqueued on `s` so far reads the last submitted step's publishes: its
  /// slot is not rewritten before `s` has passed this point. Needed for readers on a stream other
  /// than the next submit's. Throws ferry::error on a capturing stream.
  void record_use(stream_ref<B> s) {
    core& k = c();
    [[maybe_unused]] const auto on_device = ops::enter(s, k.device_);
    if (k.prev_ == none) return;
    k.slots_.reserve_stamp(k.prev_);  // before the mark: a point made must be kept
    k.slots_.add_stamp(k.prev_, detail::shared_timeline<B>().mark(s));
  }

  /// Steps submitted so far.
  [[nodiscard]] std::uint64_t steps() const noexcept { return core_ ? core_->steps_ : 0; }
  /// True between begin() and submit().
  [[nodiscard]] bool in_step() const noexcept { return core_ && core_->open_; }
  /// Slots now (0 before reserve() or the first begin()).
  [[nodiscard]] std::size_t slots() const noexcept { return core_ ? core_->slots_.size() : 0; }

 private:
  core& c() const {
    if (!core_) throw error("ferry: use of a moved-from step_batch");
    return *core_;
  }

  static std::size_t table_bytes(std::size_t descs) {
    return detail::checked_add<capacity_error>(
        sizeof(detail::step_header),
        detail::checked_bytes<capacity_error>(descs, sizeof(detail::chunk_desc), "a step table"), "a step table");
  }

  // The plan's capacity (step_core::declared_capacity): the limits under growth::fixed, the
  // initial sizes, as the GrowthPolicy grows them, otherwise.
  std::pair<std::size_t, std::size_t> planned_capacity() const {
    auto [descs, bytes] = core_->declared_capacity();
    if constexpr (!fixed) {
      descs = detail::grown_capacity<growth_policy>(descs, 0);
      bytes = detail::grown_capacity<growth_policy>(bytes, 0);
    }
    return {descs, bytes};
  }

  typename core::slot make_slot() {
    core& k = *core_;
    typename core::slot s;
    try {
      s.table = k.arena_->acquire(table_bytes(k.want_table_));
      s.table_cap = k.want_table_;
      s.content = k.arena_->acquire(k.want_content_);
      if constexpr (graphs) s.graph = step_ops::make_graph(ops::mapped(s.table.data), s.table_cap, k.device_);
    } catch (...) {
      release_slot(s);
      throw;
    }
    return s;
  }

  // growth::pow2: a slot coming into use takes the sizes of the largest step so far, in one block
  // (its blocks have all passed: released at once).
  void fit(typename core::slot& s) {
    core& k = *core_;
    if (s.table_cap < k.want_table_) regrow_table(s, k.want_table_);
    if (s.content.capacity < k.want_content_ || !s.extra.empty()) {
      const pinned_block b = k.arena_->acquire(std::max(k.want_content_, s.content.capacity));
      k.arena_->release(s.content);
      for (const auto& e : s.extra) k.arena_->release(e);
      s.extra.clear();
      s.content = b;
    }
  }
  void regrow_table(typename core::slot& s, std::size_t descs) {
    const pinned_block b = core_->arena_->acquire(table_bytes(descs));
    core_->arena_->release(s.table);
    s.table = b;
    s.table_cap = descs;
  }

  // submit()'s work around `enqueue(slot, table, blocks)`, which launches the step's kernel or a
  // graph holding it under the reuse core's lock. Everything that can throw (the checks, the
  // GrowthPolicy's answers, a table regrown, room for the stamps) comes before the enqueue, so that
  // a submit that throws has enqueued nothing and leaves the step open; after it nothing throws,
  // except the marking itself, which then abandons what the step reads (abandon_step).
  template <class Enqueue>
  FERRY_KERNEL_VISIBILITY void submit_by(stream_ref<B> s, Enqueue&& enqueue) {
    core& k = c();
    [[maybe_unused]] const auto on_device = ops::enter(s, k.device_);
    k.check_open("submit");
    auto& sl = k.slots_[k.cur_];
    for (const auto& f : k.fills_) {
      if (f.publish != none && f.index >= k.publishes_[f.publish].n)
        throw std::out_of_range("ferry: step_batch::submit: a fill reads element " + std::to_string(f.index) +
                                " of a publish that holds " + std::to_string(k.publishes_[f.publish].n) +
                                " elements this step");
    }
    const auto z = k.resolve_and_measure();
    const std::size_t n = z.descs;
    if (n > sl.table_cap) {
      if constexpr (fixed) {
        throw capacity_error("ferry: step_batch (growth::fixed): the step needs " + std::to_string(n) +
                             " descriptors, more than the " + std::to_string(sl.table_cap) + " of its slot");
      } else {
        const std::size_t want = std::max(k.want_table_, detail::grown_capacity<growth_policy>(n, sl.table_cap));
        regrow_table(sl, want);  // nothing changes if it throws
        k.want_table_ = want;    // a larger table in the open step's slot is all that stays if a later check throws
      }
    }
    std::size_t want_content = k.want_content_;
    if constexpr (!fixed) {
      if (z.bytes > want_content) [[unlikely]]
        want_content = grown_content(z.bytes);
    }
    k.slots_.reserve_stamp(k.cur_);
    const bool stamps_prev = k.prev_ != none && k.prev_ != k.cur_;
    if (stamps_prev) k.slots_.reserve_stamp(k.prev_);
    k.encode(sl);
    auto* header = reinterpret_cast<detail::step_header*>(sl.table.data);
    const void* table = ops::mapped(sl.table.data);
    const std::size_t blocks = graphs ? sl.table_cap : std::max<std::size_t>(n, 1);
    bool enqueued = false;
    detail::stamp st;
    try {
      st = detail::shared_timeline<B>().mark_with(s, [&](const detail::kernel_mark& m) {
        header->counter = reinterpret_cast<std::uintptr_t>(m.counter);
        header->blocks_done = reinterpret_cast<std::uintptr_t>(m.blocks_done);
        header->value = m.value;
        enqueue(sl, table, blocks);
        enqueued = true;
      });
    } catch (...) {
      if (enqueued) abandon_step();
      throw;
    }
    k.slots_.add_stamp(k.cur_, st);  // room reserved above: no allocation, no throw
    if (stamps_prev) k.slots_.add_stamp(k.prev_, st);
    k.prev_ = k.cur_;
    k.prev_published_ = z.published;
    k.want_content_ = want_content;
    k.open_ = false;
    ++k.steps_;
  }

  // growth::pow2 and user policies: the content capacity every slot is wanted at once a step of
  // `bytes` outgrew it, as the GrowthPolicy answers; the answer is proven by taking a block of that
  // size from the arena (given back at once, unused: the next slot that grows takes it), so that an
  // answer no block can hold throws here (ferry::capacity_error, or ferry::out_of_memory), before
  // anything is enqueued, instead of at every later begin().
  FERRY_COLD std::size_t grown_content(std::size_t bytes) {
    core& k = *core_;
    const std::size_t want = std::max(k.want_content_, detail::grown_capacity<growth_policy>(bytes, k.want_content_));
    try {
      k.arena_->release(k.arena_->acquire(want));
    } catch (const capacity_error& e) {
      throw capacity_error("ferry: step_batch::submit: the GrowthPolicy's capacity_for(" + std::to_string(bytes) +
                           ", " + std::to_string(k.want_content_) + ") answered " + std::to_string(want) +
                           " bytes, which no pinned block can hold (" + e.what() + ")");
    }
    return want;
  }

  // The open step was enqueued but could not be stamped: its slot, and the previous step's (whose
  // readers on the stream this stamp would have covered), leave the ring without being released:
  // their blocks are leaked, never rewritten under a reader. The step counts as submitted.
  void abandon_step() noexcept {
    core& k = *core_;
    std::size_t drop[2] = {k.cur_, k.prev_ != none && k.prev_ != k.cur_ ? k.prev_ : none};
    if (drop[1] != none && drop[1] > drop[0]) std::swap(drop[0], drop[1]);  // the higher index first
    for (const std::size_t i : drop)
      if (i != none) (void)k.slots_.abandon(i);
    k.cur_ = k.prev_ = none;
    k.prev_published_ = false;
    k.open_ = false;
    ++k.steps_;
  }

  // Gives a slot's blocks (and graph) back; the ring calls it once the slot's stamps have passed
  // (a slot whose readers could not be waited for is leaked, never reused under a reader).
  void release_slot(typename core::slot& s) noexcept {
    auto& arena = *core_->arena_;
    detail::destructor_guard([&] {
      if constexpr (graphs) step_ops::destroy_graph(s.graph);
      if (s.table) arena.release(s.table);
      if (s.content) arena.release(s.content);
      for (const auto& e : s.extra) arena.release(e);
    });
    s = {};
  }
  void release_all_slots() noexcept {
    core_->slots_.release([&](typename core::slot& s) { release_slot(s); });
  }
  // Destruction is a use of every slot: the last step's publishes may have readers that no stamp
  // covers (the next submit would have stamped them): the device is synchronized first, which
  // needs no stream that may be gone by now.
  void release_all() noexcept {
    if (!core_) return;
    core_->dead_ = true;  // its handles end
    core_->open_ = false;
    if (core_->prev_published_)
      detail::destructor_guard([&] { ops::synchronize_device(core_->device_); });
    release_all_slots();
  }

  std::shared_ptr<core> core_;  // shared with the handles, which outlive it only to report so
};

}  // namespace ferry
