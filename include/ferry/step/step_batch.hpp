// ferry/step/step_batch.hpp: step_batch<Policies...>, a whole engine step (packed uploads, UVA
// publishes, staged writes into any number of targets, device-side fills) gathered into one
// pinned slot and submitted as one kernel launch or one graph replay.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/mapping.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/nvtx.hpp>
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
#include <ferry/step/detail/step_capture.hpp>
#include <ferry/step/detail/step_core.hpp>
#include <ferry/step/detail/step_handle.hpp>
#include <ferry/step/step_context.hpp>
#include <ferry/step/step_handles.hpp>
#include <ferry/step/step_stats.hpp>

#if defined(__CUDACC__)
#include <ferry/backend/detail/mapping_probe.cuh>
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

namespace detail {
struct step_batch_access;
}  // namespace detail

/// A whole engine step in one launch (docs/step_batch.md). At setup an engine declares what every
/// step moves: `add_upload` (a packed array into a device buffer), `add_publish` (an array kernels
/// read in place through UVA), `add_writes` (staged row-segment writes into a 2-D target),
/// `add_gather` (dst[i] = src[idx[i]] from device memory, or a host value) and `add_fill` (a device
/// destination filled from a device value). Every step: `begin()` takes a free pinned slot; the
/// handles write the step's host data straight into it; `submit(stream)` enqueues ONE kernel launch
/// (launch::kernel) or ONE replay of the batch's one graph executable (launch::graph) that does
/// all of it, runs the epilogue (EpiloguePolicy: a functor deriving inputs on the device from
/// what landed) and, as its last act, records its completion for ferry's reuse core (no event,
/// no query in steady state). `submit_with` lets an engine replay the step inside its own graph.
/// The host backend runs the same plan as one host task, with identical results.
///
/// Policies (any order, each family at most once): GrowthPolicy (`growth::pow2` default;
/// `growth::fixed`: the declared maxima are the capacity), ReusePolicy (`reuse::event_fenced`
/// default; `reuse::throw_when_full`; `reuse::caller_fenced`), LaunchPolicy (`launch::kernel`
/// default; `launch::graph`, which needs growth::fixed; `launch::capture`, which also does: the
/// step recorded once into the engine's own stream capture by record(), each step published by
/// commit() with no CUDA call and run by the engine's replay), EpiloguePolicy (`epilogue::none`
/// default; `epilogue::functor<F>`: F's `FERRY_HOST_DEVICE operator()(const step_context&) const`
/// runs after every upload, write, gather and fill of the step has landed, on CUDA by every thread
/// of the launch's last block, on the host backend once: what it throws there comes back once, as
/// ferry::error, from the next synchronizing call on the stream, as an enqueue_host task's
/// error does), Backend; and the presets.
///
/// Rules (checked, not only documented; docs/step_batch.md): a step's destinations are disjoint,
/// except writes into one target (the later staged wins); fill and gather sources are not written
/// by the step's uploads, writes, gathers or fills (its epilogue runs after they were read, and
/// may write them); **a published view stays valid for work enqueued on the submit's stream before
/// the next submit** (on another stream: record_use(stream)). Under event_fenced a slot is
/// rewritten only once its kernel and its publishes' readers have passed (the readers of a step
/// that published are stamped by the next submit, so its slot is held until that step has run):
/// begin() takes a free slot, else inserts one up to max_slots, else (a full ring) waits for the
/// next slot (a synchronization, counted by sync_guard; throw_when_full throws
/// ferry::capacity_error). Under
/// caller_fenced the caller makes sure a slot's step and readers are done `slots` steps later.
/// begin(), cancel(), the handles' calls, reserve(), set_epilogue() and the add_* calls touch no
/// stream (capture-safe); submit(), submit_with() and record_use() throw ferry::error on a
/// capturing stream. Handles share the batch's state: valid while it lives (moves included),
/// each call throws ferry::error once it is destroyed or assigned over. Destruction waits for the
/// batch's kernels and its last publishes' readers. Its kernel reads the slots in place: on a
/// device whose mapping ferry's probe finds dead, construction throws ferry::error. Move-only;
/// not thread-safe.
/// launch::capture's record() is the one call made on a capturing stream.
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
  static constexpr bool capture = detail::records_capture<launch_policy>;
  static_assert(!launch_policy::replays_graph || capture || growth_policy::stable_addresses,
                "ferry: launch::graph replays a graph over fixed slot addresses and needs "
                "growth::fixed (presets::graph_safe)");
  static_assert(!capture || growth_policy::stable_addresses,
                "ferry: launch::capture records one launch of the step kernel into the engine's graph, with a "
                "grid of one block per descriptor of the plan's capacity and a ring of tables of that capacity "
                "fixed there; a step grown past them would need a new recording: it needs growth::fixed "
                "(presets::graph_safe)");
  static constexpr bool graphs = launch_policy::replays_graph && (step_ops::graphs || capture);
  static_assert(detail::step_epilogue_callable<epilogue_type>(),
                "ferry: step_batch's epilogue functor must be callable as `f(const ferry::step_context&)` "
                "on a const functor (FERRY_HOST_DEVICE void operator()(const ferry::step_context&) const)");
  using core = detail::step_core<B, growth_policy, reuse_policy, epilogue_type, graphs>;
  using handle = detail::step_handle<step_batch, core>;
  using capture_state =
      std::conditional_t<capture, std::unique_ptr<detail::step_capture<B, core>>, detail::no_capture>;
  template <class, class>
  friend class step_upload;
  template <class, class>
  friend class step_publish;
  template <class, class>
  friend class step_gather;
  template <class, class>
  friend class step_writes;
  friend struct detail::step_batch_access;
  static constexpr std::size_t none = core::none;

 public:
  /// The default ceiling on slots.
  static constexpr std::size_t default_max_slots = detail::ring_default_max_slots;

  // ---- handles (step_handles.hpp: empty when default-constructed; they share the batch's state)

  template <class T>
  using upload = step_upload<step_batch, T>;    ///< A packed upload into a device buffer.
  template <class T>
  using publish = step_publish<step_batch, T>;  ///< An array kernels read in place (UVA).
  template <class T>
  using gather = step_gather<step_batch, T>;    ///< Device rows by host indices, or host rows.
  template <class T>
  using writes = step_writes<step_batch, T>;    ///< Staged writes into a rows x cols target.

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
    core::slots_type::check_counts(slots, max_slots);
    detail::require_live_mapping<B>(ops::current_device(), "step_batch");  // its kernel reads slots in place
    step_ops::template preload<epilogue_type>();
    core_ = std::make_shared<core>(slots, max_slots, ops::current_device(), arena,
                                   detail::step_slot_ops_of<B, epilogue_type>);
    if constexpr (capture) capture_ = std::make_unique<typename capture_state::element_type>(arena);
  }
  /// Takes over `o`'s slots and plan; handles and views handed out by `o` stay valid (they refer
  /// to the plan, which moves as a whole); `o` is left empty.
  step_batch(step_batch&& o) noexcept = default;
  /// Releases this batch (as the destructor does: its open step is dropped, and its handles end:
  /// each of their calls throws ferry::error), then takes `o`'s plan, slots and handles, which stay
  /// valid.
  step_batch& operator=(step_batch&& o) noexcept {
    if (this != &o) {
      if (core_) close();
      core_ = std::move(o.core_);
      capture_ = std::move(o.capture_);
    }
    return *this;
  }
  /// Waits for the batch's kernels and for the readers of the last step's publishes, then gives
  /// every block back to the arena. Its handles end (each of their calls throws ferry::error).
  ~step_batch() {
    if (core_) close();
  }

  // ---- the plan --------------------------------------------------------------------------------

  /// Declares a packed upload of up to `max_n` elements into `dst` per step (max_n <= dst.size(),
  /// else std::invalid_argument; under growth::fixed max_n is the limit, under pow2 a hint).
  template <class T>
  [[nodiscard]] upload<T> add_upload(device_span<T> dst, std::size_t max_n) {
    static_assert((detail::check_element<T>(), true));
    return upload<T>(core_, c().plan().add_upload(reinterpret_cast<std::uintptr_t>(dst.data()), sizeof(T), dst.size(), max_n));
  }

  /// Declares a UVA publish of up to `max_n` elements per step (fixed: the limit; pow2: a hint).
  template <class T>
  [[nodiscard]] publish<T> add_publish(std::size_t max_n) {
    static_assert((detail::check_element<T>(), true));
    return publish<T>(core_, c().plan().add_publish(sizeof(T), max_n));
  }

  /// Declares staged writes into the rows x cols target `target` (device memory or UVA), of up to
  /// `max_writes` writes of `max_elements` elements in all per step (fixed: the limits; pow2:
  /// hints).
  template <class T>
  [[nodiscard]] writes<T> add_writes(staged_view<T> target, std::size_t max_writes = 0, std::size_t max_elements = 0) {
    static_assert((detail::check_element<T>(), true));
    return writes<T>(core_, c().plan().add_writes(reinterpret_cast<std::uintptr_t>(target.data_handle()), target.extent(0),
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
  /// UVA, read by the step's launch: never by the host; no destination of the plan may cover it,
  /// whichever is declared first): max_n <= dst.size(), else std::invalid_argument (under
  /// growth::fixed max_n is the limit, under pow2 a hint). Indices are int32, so a source of more
  /// than 2^31 elements (rows an index cannot reach) is std::invalid_argument too.
  template <class T>
  [[nodiscard]] gather<T> add_gather(device_span<T> dst, device_span<const T> src, std::size_t max_n) {
    static_assert((detail::check_element<T>(), true));
    return gather<T>(core_, c().plan().add_gather(reinterpret_cast<std::uintptr_t>(dst.data()), sizeof(T), dst.size(),
                                           reinterpret_cast<std::uintptr_t>(src.data()), src.size(), max_n));
  }

  /// Sets the epilogue functor's state (its references, its device pointers) for every step; plan
  /// time only (ferry::error once the first step began or reserve() was called). Until then the
  /// epilogue is a value-initialized `epilogue_type`.
  template <class F = epilogue_type>
    requires(!std::is_void_v<F> && std::same_as<F, epilogue_type>)
  void set_epilogue(const F& f) {
    c().plan().set_epilogue(f);
  }

  /// Declares a fill, every step, of every element of `dst` with the value at `device_value`
  /// (device memory or UVA, read by the step's kernel: never by the host; no destination of the
  /// plan may cover it).
  template <class T>
  void add_fill(device_span<T> dst, const T* device_value) {
    static_assert((detail::check_element<T>(), true));
    c().plan().add_fill(reinterpret_cast<std::uintptr_t>(dst.data()), dst.size_bytes(),
                        reinterpret_cast<std::uintptr_t>(device_value), sizeof(T), none, 0);
  }
  /// Declares a fill, every step, of every element of `dst` with element `index` of this step's
  /// `src` publish (its span() call must cover index, else submit throws std::out_of_range).
  template <class T>
  void add_fill(device_span<T> dst, const publish<T>& src, std::size_t index) {
    const handle& h = src;
    if (h.core_ != core_) throw std::invalid_argument("ferry: step_batch::add_fill: a publish of another batch");
    c().plan().add_fill(reinterpret_cast<std::uintptr_t>(dst.data()), dst.size_bytes(), 0, sizeof(T), h.i_, index);
  }

  /// Fixes the plan and allocates every slot now at its declared capacity (growth::fixed: the
  /// capacity; launch::graph: also instantiates each slot's graph), so that steady state
  /// allocates nothing. The first begin() does this when not called. Not a hot path.
  void reserve() { c().reserve(); }

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
    if constexpr (capture)
      capture_->begin(c());  // a replay without a commit reported first
    else
      c().begin();
  }

  /// Drops the open step: what its handles recorded is gone (pending() is 0, a publish's view()
  /// is empty), nothing is enqueued, and its slot is free again: under caller_fenced the next
  /// begin() takes it again (the rotation follows submitted steps), otherwise it chooses among the
  /// free slots as after the step before (it may take another first, e.g. one never used yet).
  /// Touches no stream (capture-safe); outside a step it does nothing. The way out of a
  /// step that submit() refused and that the engine will not fix.
  void cancel() { c().cancel(); }

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
    static_assert(!capture, "ferry: a launch::capture batch's steps run in the engine's replays: commit() "
                            "each step (docs/step_batch.md, launch::capture)");
    [[maybe_unused]] const detail::nvtx_scope<detail::nvtx_names::step_submit> range;
    c().submit(s);
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
    requires(graphs && !capture && std::invocable<Launch&, cudaGraph_t>)
  FERRY_KERNEL_VISIBILITY void submit_with(stream_ref<B> s, Launch&& launch) {
    [[maybe_unused]] const detail::nvtx_scope<detail::nvtx_names::step_submit> range;
    c().submit_with(s, [&](const detail::step_graph& g) { launch(static_cast<cudaGraph_t>(g.graph)); });
  }
#endif

  // ---- launch::capture: the step inside the engine's own graph (docs/step_batch.md) ------------

#if FERRY_HAS_CUDA
  /// Records the batch's step into the engine's stream capture on `s` (cudaStreamBeginCapture's
  /// stream, or torch.cuda.graph's): one launch of the step kernel, which at every replay of the
  /// engine's graph reads the batch's step counter, finds the committed step's table in the
  /// batch's ring (never an address growth may free: slots inserted later are reached through
  /// the tables) and runs it (every upload, write, gather, fill and the epilogue), then advances
  /// the counter and marks the step's slot passed; a replay that finds no committed step does no
  /// work and reports it (the next begin() or commit() throws). The one call of ferry allowed on
  /// a capturing stream; may be made once per graph the engine captures (every replay of any of
  /// them runs the next committed step). Needs reserve() called before (a capture forbids
  /// allocation): ferry::error otherwise, on a stream that is not capturing, or one of another
  /// device (known from the reference: a ferry::stream's, or stream_ref::identified's, made before
  /// the capture; a bare handle's device is not asked of the runtime, which would invalidate the
  /// capture, and the launch fails on a stream of another device). Makes no other runtime call on
  /// `s` than the launch. The graph must not be replayed once the batch is destroyed.
  FERRY_KERNEL_VISIBILITY void record(stream_ref<B> s)
    requires(capture && std::same_as<B, backend::cuda>)
  {
    capture_->record(c(), s);
  }
#endif

  /// Commits the open step for the engine's next replay: submit()'s checks and errors (whatever
  /// throws has committed nothing and leaves the step open), the step encoded into the table its
  /// replay will find, its slot stamped with the replay's mark; then the step is published by a
  /// store to mapped memory: NO CUDA call. One commit per replay, in order: the engine enqueues
  /// the replay that runs this step after commit() returns (later replays may be enqueued
  /// before this one has run: the host may commit step k+1 while replay k is queued). Throws
  /// ferry::error first when a replay has found no committed step (see record()).
  void commit()
    requires(capture)
  {
    [[maybe_unused]] const detail::nvtx_scope<detail::nvtx_names::step_commit> range;
    capture_->commit(c());
  }

  /// The host backend's stand-in for one replay of an engine's graph holding the recorded step
  /// (the host backend has no stream capture): enqueues on `s` what the recorded kernel does at a
  /// replay, with the same protocol (the table found through the step counter, the step run when
  /// committed, else reported as a replay without a commit). Tests the commit protocol, not a
  /// capture. Needs reserve() called before; the batch must outlive the enqueued work.
  void replay_recorded(stream_ref<B> s)
    requires(capture && std::same_as<B, backend::host>)
  {
    capture_->replay(c(), s);
  }

  /// Committed steps that a replay has run so far (a load of mapped memory; no CUDA call).
  [[nodiscard]] std::uint64_t replayed() const noexcept
    requires(capture)
  {
    return core_ ? capture_->replayed(*core_) : 0;
  }

  /// Throws ferry::error when a replay found no committed step, or when a committed step has not
  /// been run by a replay: call it where the engine knows that its replays have run (after
  /// synchronizing the stream they run on), the one point where a commit without a replay can be
  /// told from a replay still queued.
  void check_replayed() const
    requires(capture)
  {
    capture_->check_replayed(c());
  }

  /// Declares that work enqueued on `s` so far reads the last submitted step's publishes: its
  /// slot is not rewritten before `s` has passed this point (stamped where ferry fences; under
  /// caller_fenced nothing is stamped: that is the caller's promise). Needed for readers on a
  /// stream other than the next submit's. Throws ferry::error on a capturing stream.
  void record_use(stream_ref<B> s) { c().record_use(s); }

  /// Steps submitted (launch::capture: committed) so far.
  [[nodiscard]] std::uint64_t steps() const noexcept { return core_ ? core_->steps() : 0; }
  /// True between begin() and submit().
  [[nodiscard]] bool in_step() const noexcept { return core_ && core_->open(); }
  /// Slots now (0 before reserve() or the first begin()).
  [[nodiscard]] std::size_t slots() const noexcept { return core_ ? core_->slots() : 0; }
  /// Counters (see ferry::step_stats); all zero on a moved-from batch.
  [[nodiscard]] step_stats stats() const noexcept { return core_ ? core_->stats() : step_stats{}; }

 private:
  core& c() const {
    if (!core_) throw error("ferry: use of a moved-from step_batch");
    return *core_;
  }

  /// The batch's end: its slots (and, under launch::capture, its capture state) closed.
  void close() noexcept {
    if constexpr (capture)
      capture_->close(*core_);
    else
      (void)core_->close();
  }

  std::shared_ptr<core> core_;  // shared with the handles, which outlive it only to report so
  [[no_unique_address]] capture_state capture_;  // launch::capture's line and status
};

namespace detail {
/// What ferry's tests read of a step_batch that its interface does not show.
struct step_batch_access {
  /// The descriptors of the last submitted step (the blocks of its launch that have work).
  template <class Batch>
  static std::size_t last_descriptors(const Batch& b) noexcept {
    return b.core_ ? b.core_->last_descriptors() : 0;
  }
};
}  // namespace detail

}  // namespace ferry
