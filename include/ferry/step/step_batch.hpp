// ferry/step/step_batch.hpp: step_batch<Policies...>, a whole engine step (packed uploads, UVA
// publishes, staged writes into any number of targets, device-side fills) gathered into one
// pinned slot and submitted as one kernel launch or one graph replay.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/staged_view.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/policies/epilogue.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/launch.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/staged/staged_write_tensor.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/detail/step_handle.hpp>
#include <ferry/step/detail/step_slots.hpp>
#include <ferry/step/detail/step_submit.hpp>
#include <ferry/step/step_context.hpp>

#if defined(__CUDACC__)
#include <ferry/step/detail/step_kernel.cuh>
#endif

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ranges>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace ferry {

/// A whole engine step in one launch. At setup an engine declares what every step moves:
/// `add_upload` (a packed array into a device buffer), `add_publish` (an array that kernels read
/// in place through UVA), `add_writes` (staged row-segment writes into a 2-D target: a
/// staged_write_tensor or any device matrix view, of any element type), `add_gather` (device rows
/// picked by host indices, or taken from the host: dst[i] = src[idx[i]]) and `add_fill` (a device
/// destination filled from a device value). Every step then: `begin()` takes the next pinned
/// slot; the handles write the step's host data straight into it (`span(n)`, `stage_write`,
/// `indices(n)`); `submit(stream)` enqueues ONE kernel launch (launch::kernel) or ONE graph replay
/// (launch::graph: one executable for every step) that reads the descriptors and contents through
/// UVA and does all of it, runs the epilogue (EpiloguePolicy: a functor deriving inputs on the
/// device from what landed) and records its own completion for ferry's reuse core as its last act
/// (no event record, no query in steady state). Under launch::graph an engine may replay the step
/// inside its own graph instead: `submit_with(stream, launch)` hands it the step graph to hold as
/// a child node. The host backend runs the same plan as one host task, with identical results.
///
/// Policies (any order, each family at most once): GrowthPolicy (`growth::pow2` default: a step
/// larger than its slot takes more arena memory for that step, and every slot grows to the
/// largest step at its next use; `growth::fixed`: the declared maxima are the capacity, beyond
/// them ferry::capacity_error and nothing is recorded), ReusePolicy (`reuse::event_fenced`
/// default; `reuse::throw_when_full`; `reuse::caller_fenced`), LaunchPolicy (`launch::kernel`
/// default; `launch::graph`, which needs growth::fixed: presets::graph_safe), EpiloguePolicy
/// (`epilogue::none` default; `epilogue::functor<F>`), Backend; and the presets.
///
/// **The epilogue** (epilogue::functor<F>): F is trivially copyable, its state set at plan time
/// (set_epilogue), and `f(const step_context&)` runs in the step's launch once every upload,
/// write, gather and fill of the step has landed: on CUDA by every thread of one block (the last
/// to finish), on the host backend once on the host, so its call operator is FERRY_HOST_DEVICE
/// for both. Through the context it reads the step's views (step_ref from a handle's ref()) and
/// the step's number; it may read and write device memory it holds pointers to (per-request
/// state, a block table, a sampler's output), except what a fill or gather of the same step reads
/// and what the step's destinations hold (their values are this step's: read them); a publish's
/// view is pinned host memory: read it, never write it. Kernels after the step on its stream see
/// what it wrote.
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
/// ferry::error on a capturing stream (the graph a replay uses is ferry's own, one per batch).
///
/// Handles are small values that share the batch's state; they stay valid while it lives (moves
/// included); once it is destroyed or assigned over, each of their calls throws ferry::error, as
/// on an empty handle. Destruction waits for the batch's kernels and for the readers of the last step's
/// publishes (the device, as freeing memory does: their streams may be gone). Move-only; not
/// thread-safe.
template <class... Policies>
class step_batch {
  using policies = detail::policies<
      detail::type_list<families::growth, families::reuse, families::launch, families::backend, families::epilogue>,
      Policies...>;

 public:
  using backend_type = typename policies::backend;        ///< The backend (Backend policy).
  using growth_policy = typename policies::growth;        ///< Slot growth (GrowthPolicy).
  using reuse_policy = typename policies::reuse;          ///< Who fences slots (ReusePolicy).
  using launch_policy = typename policies::launch;        ///< How a step is submitted.
  using epilogue_policy = typename policies::epilogue;    ///< What runs after the step's data landed.
  /// The epilogue's functor type (void: none).
  using epilogue_type = typename epilogue_policy::functor_type;

 private:
  using B = backend_type;
  using ops = detail::backend_ops<B>;
  using step_ops = detail::step_ops<B>;
  static_assert(!launch_policy::replays_graph || growth_policy::stable_addresses,
                "ferry: launch::graph replays a graph over fixed slot addresses and needs "
                "growth::fixed (presets::graph_safe)");
  static constexpr bool graphs = launch_policy::replays_graph && step_ops::graphs;
  static_assert(detail::step_epilogue_callable<epilogue_type>(),
                "ferry: step_batch's epilogue functor must be callable as `f(const ferry::step_context&)` "
                "on a const functor (FERRY_HOST_DEVICE void operator()(const ferry::step_context&) const)");
  using slots_of = detail::step_slots<B, growth_policy, reuse_policy, epilogue_type, graphs>;
  using submitter = detail::step_submit<slots_of>;
  using core = typename slots_of::core;
  using handle = detail::step_handle<step_batch, core>;
  static constexpr std::size_t none = core::none;

 public:
  /// The default ceiling on slots.
  static constexpr std::size_t default_max_slots = detail::ring_default_max_slots;

  // ---- handles (empty when default-constructed; they share the batch's state) -----------------

  /// A packed upload into a device buffer: each step, `span(n)` is where the host writes the
  /// first n elements of the destination (pinned slot memory); the submit copies them.
  template <class T>
  class upload : public handle {
    using handle::handle, handle::state, handle::i_;

   public:
    /// This step's n elements for destination[0, n), uninitialized: write every one of them
    /// before submit(). A second call in one step replaces the first. n > destination().size():
    /// std::out_of_range; growth::fixed and n > the declared max_n: ferry::capacity_error
    /// (nothing changes either way).
    [[nodiscard]] std::span<T> span(std::size_t n) {
      return {reinterpret_cast<T*>(state("upload").upload_span(i_, n, sizeof(T))), n};
    }
    /// The device buffer this upload fills. ferry::error for an empty handle or one whose batch
    /// was assigned over or destroyed.
    [[nodiscard]] device_span<T> destination() const {
      const auto& r = state("upload").uploads_[i_];
      return {reinterpret_cast<T*>(r.dst), r.limit};
    }
    /// The epilogue's reference to this upload: destination[0, n) for the step's n.
    [[nodiscard]] step_ref<T> ref() const {
      return detail::step_ref_access<T>::make(static_cast<std::uint32_t>(state("upload").uploads_[i_].view));
    }
  };

  /// A UVA publish: each step, `span(n)` is where the host writes n elements (pinned slot
  /// memory); `view()` is what kernels read in place, with no copy (see the class's lifetime rule).
  template <class T>
  class publish : public handle {
    using handle::handle, handle::state, handle::i_;

   public:
    /// This step's n elements, uninitialized: write every one before submit(). A second call in
    /// one step replaces the first. growth::fixed and n > the declared max_n:
    /// ferry::capacity_error (nothing changes).
    [[nodiscard]] std::span<T> span(std::size_t n) {
      return {reinterpret_cast<T*>(state("publish").publish_span(i_, n, sizeof(T))), n};
    }
    /// The kernel-readable view of the last span() of the current (or last submitted) step;
    /// empty before the step's span() call and after cancel(). ferry::error for an empty handle
    /// or one whose batch was assigned over or destroyed.
    [[nodiscard]] device_span<const T> view() const {
      core& k = state("publish");
      const auto& r = k.publishes_[i_];
      const device_span<const T> v(static_cast<const T*>(ops::mapped(r.at)), r.n);
#if FERRY_CHECKED_VIEWS
      if (r.n != 0 && k.cur_ != none) return detail::stamp_view(v, k.slots_[k.cur_].generation, "step_batch");
#endif
      return v;
    }
    /// The epilogue's reference to this publish: the step's n elements in its slot.
    [[nodiscard]] step_ref<const T> ref() const {
      return detail::step_ref_access<const T>::make(static_cast<std::uint32_t>(state("publish").publishes_[i_].view));
    }
  };

  /// A gather into a device buffer: each step, `indices(n)` is where the host writes the source
  /// row of each of dst[0, n); the submit's launch sets dst[i] = src[indices[i]] when it runs
  /// (stream order: the source may be written by work enqueued before the submit, such as the
  /// previous step's sampler), or, where indices[i] is ferry::from_host, host_values()[i].
  template <class T>
  class gather : public handle {
    using handle::handle, handle::state, handle::i_;

   public:
    /// This step's n indices for destination[0, n) (pinned slot memory), uninitialized: write
    /// every one before submit(), each in [0, source size) or ferry::from_host (checked by
    /// submit: std::out_of_range, nothing enqueued). A second call in one step replaces the first
    /// (and its host values). n > destination().size(): std::out_of_range; growth::fixed and
    /// n > the declared max_n: ferry::capacity_error (nothing changes either way).
    [[nodiscard]] std::span<std::int32_t> indices(std::size_t n) {
      return {state("gather").gather_indices(i_, n), n};
    }
    /// After indices(n): n host values (pinned slot memory, uninitialized), taken by the rows
    /// whose index is ferry::from_host; the other rows' values are not read. ferry::error before
    /// indices() in the step.
    [[nodiscard]] std::span<T> host_values() {
      core& k = state("gather");
      return {reinterpret_cast<T*>(k.gather_values(i_)), k.gathers_[i_].n};
    }
    /// The device buffer this gather fills.
    [[nodiscard]] device_span<T> destination() const {
      const auto& r = state("gather").gathers_[i_];
      return {reinterpret_cast<T*>(r.dst), r.limit};
    }
    /// The epilogue's reference to this gather: destination[0, n) for the step's n.
    [[nodiscard]] step_ref<T> ref() const {
      return detail::step_ref_access<T>::make(static_cast<std::uint32_t>(state("gather").gathers_[i_].view));
    }
  };

  /// Staged writes into one rows x cols target, as staged_write_tensor's: each is recorded
  /// straight into the slot and applied by the step's submit.
  template <class T>
  class writes : public handle {
    using handle::handle, handle::state, handle::state_or_null, handle::i_;

   public:
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
    [[nodiscard]] std::size_t pending() const { return count([](const auto& r) { return r.writes; }); }
    /// Elements recorded in the open step.
    [[nodiscard]] std::size_t pending_elements() const { return count([](const auto& r) { return r.elements; }); }
    /// The target's rows.
    [[nodiscard]] std::size_t rows() const { return count([](const auto& r) { return r.rec.rows(); }); }
    /// The target's columns.
    [[nodiscard]] std::size_t cols() const { return count([](const auto& r) { return r.rec.cols(); }); }

   private:
    template <class R>
    void stage(std::size_t row, std::size_t start, R&& src) {
      state("writes").template stage_write<T>(i_, row, start, src);
    }
    template <class F>
    std::size_t count(F of) const {
      const core* k = state_or_null("writes");
      return k ? of(k->writes_[i_]) : 0;
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
    slots_of::check_counts(slots, max_slots);
    core_ = std::make_shared<core>(slots, max_slots, ops::current_device(), arena);
    step_ops::template preload<epilogue_type>();
  }
  /// Takes over `o`'s slots and plan; handles and views handed out by `o` stay valid (they refer
  /// to the plan, which moves as a whole); `o` is left empty.
  step_batch(step_batch&& o) noexcept = default;
  /// Releases this batch (as the destructor does: its open step is dropped, and its handles end:
  /// each of their calls throws ferry::error), then takes `o`'s plan, slots and handles, which stay
  /// valid.
  step_batch& operator=(step_batch&& o) noexcept {
    if (this != &o) {
      if (core_) slots_of::close(*core_);
      core_ = std::move(o.core_);
    }
    return *this;
  }
  /// Waits for the batch's kernels and for the readers of the last step's publishes, then gives
  /// every block back to the arena. Its handles end (each of their calls throws ferry::error).
  ~step_batch() {
    if (core_) slots_of::close(*core_);
  }

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

  /// Declares a gather of up to `max_n` elements per step into `dst` from `src` (device memory or
  /// UVA, read by the step's launch: never by the host; no destination of the plan may cover it):
  /// max_n <= dst.size(), else std::invalid_argument (under growth::fixed max_n is the limit,
  /// under pow2 a hint). Indices are int32: rows of src beyond 2^31 - 1 are out of reach.
  template <class T>
  [[nodiscard]] gather<T> add_gather(device_span<T> dst, device_span<const T> src, std::size_t max_n) {
    static_assert((detail::check_element<T>(), true));
    return gather<T>(core_, c().add_gather(reinterpret_cast<std::uintptr_t>(dst.data()), sizeof(T), dst.size(),
                                           reinterpret_cast<std::uintptr_t>(src.data()), src.size(), max_n));
  }

  /// Sets the epilogue functor's state (its references, its device pointers) for every step; plan
  /// time only (ferry::error once the first step began or reserve() was called). Until then the
  /// epilogue is a value-initialized `epilogue_type`.
  template <class F = epilogue_type>
    requires(!std::is_void_v<F> && std::same_as<F, epilogue_type>)
  void set_epilogue(const F& f) {
    c().check_planning("set_epilogue");
    c().epilogue_ = f;
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
    const handle& h = src;
    if (h.core_ != core_) throw std::invalid_argument("ferry: step_batch::add_fill: a publish of another batch");
    c().add_fill(reinterpret_cast<std::uintptr_t>(dst.data()), dst.size_bytes(), 0, sizeof(T), h.i_, index);
  }

  /// Fixes the plan and allocates every slot now at its declared capacity (growth::fixed: the
  /// capacity; launch::graph: also instantiates each slot's graph), so that steady state
  /// allocates nothing. The first begin() does this when not called. Not a hot path.
  void reserve() { slots_of::reserve(c()); }

  // ---- a step ----------------------------------------------------------------------------------

  /// Starts a step in the next slot. Under event_fenced a slot still in use (its kernel or the
  /// readers of its publishes) is never rewritten: the slot after it is taken if free, else a new
  /// slot is inserted (up to max_slots; sized to the largest step so far, or to the plan under
  /// growth::fixed); with max_slots reached the ring is full: event_fenced blocks until the next
  /// slot has passed (a synchronization, counted by sync_guard), throw_when_full throws
  /// ferry::capacity_error naming the slot and the stream point it waits for, with nothing
  /// changed. Throws ferry::error when the step begun before was neither submitted nor
  /// cancelled. Blocks only on a full ring; never touches a stream.
  void begin() { slots_of::begin_step(c()); }

  /// Drops the open step: what its handles recorded is gone (pending() is 0, a publish's view()
  /// is empty), nothing is enqueued, and its slot is taken again by the next begin() as if this
  /// step had not begun. Touches no stream (capture-safe); outside a step it does nothing. The
  /// way out of a step that submit() refused and that the engine will not fix.
  void cancel() { slots_of::cancel_step(c()); }

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
    core& k = c();
    submitter::submit(k, s, [&](typename core::slot& sl, const void* table, std::size_t blocks) {
      if constexpr (graphs)
        step_ops::replay(s, k.graph_);
      else
        step_ops::template launch<epilogue_type>(s, table, blocks, sl.lane, &k.epilogue_);
    });
  }

#if FERRY_HAS_CUDA
  /// launch::graph on CUDA: the step graph as a child of the engine's own graph. Submits the open
  /// step as submit() does, except that the replay is the engine's: `launch(step_graph)` is
  /// called once with the batch's step graph (a cudaGraph_t with the step's one kernel node, the
  /// same for every step of the batch's life: the kernel finds the step's table on the device)
  /// and must enqueue on `s` one launch of an executable graph that the engine built once with
  /// that graph as a child node (cudaGraphAddChildGraphNode), or throw having enqueued nothing
  /// (the step then stays open). Every launch of an executable holding the step graph must be
  /// made here, one per submit, and the steps must run in submit order (one stream, or ordered
  /// by the engine): the kernel takes the step's table from the batch's device step counter, so
  /// an extra replay would run a later step's table early. Nodes that read the step's uploads,
  /// writes, gathers or fills, or what its epilogue writes, depend on the child node; publishes
  /// live in the slot: a node of the engine's graph reads them through the epilogue (which may
  /// copy them to device memory) or through a step_ref, not at addresses fixed when the graph
  /// was built. `launch` runs while ferry's reuse core holds its lock, so that no other point of
  /// `s` is made between: it must not call ferry. Errors as submit().
  template <class Launch>
    requires(graphs && std::invocable<Launch&, cudaGraph_t>)
  FERRY_KERNEL_VISIBILITY void submit_with(stream_ref<B> s, Launch&& launch) {
    core& k = c();
    submitter::submit(k, s, [&](typename core::slot&, const void*, std::size_t) {
      launch(static_cast<cudaGraph_t>(k.graph_.graph));
    });
  }
#endif

  /// Declares that work enqueued on `s` so far reads the last submitted step's publishes: its
  /// slot is not rewritten before `s` has passed this point. Needed for readers on a stream other
  /// than the next submit's. Throws ferry::error on a capturing stream.
  void record_use(stream_ref<B> s) { submitter::record_use(c(), s); }

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

  std::shared_ptr<core> core_;  // shared with the handles, which outlive it only to report so
};

}  // namespace ferry
