// ferry/step/detail/step_core.hpp: a step_batch's state, shared with its handles: the plan and
// the open step's records (step_plan), the slots (step_slots), and a step's life: begin() takes
// a slot, the handles' calls fill the step's records with the slot's contents, submit() checks,
// measures and encodes the step into its table, enqueues it as one launch or one replay under the
// reuse core's lock with the kernel mark in the table's header, and stamps its slot (and the
// previous step's) on the slot ring. The open slot and the step's number travel down as values.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/view_generation.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/detail/step_plan.hpp>
#include <ferry/step/detail/step_slots.hpp>
#include <ferry/step/step_stats.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ferry::detail {

/// The state of a step_batch over backend B with GrowthPolicy `Growth`, ReusePolicy `Reuse`,
/// epilogue `Epilogue` (void: none) and (`Graphs`) one graph over a ring of tables.
template <class B, class Growth, reuse_policy Reuse, class Epilogue, bool Graphs>
class step_core {
 public:
  using slots_type = step_slots<B, Growth, Reuse, Epilogue, Graphs>;
  using plan_type = typename slots_type::plan_type;
  using epilogue_type = Epilogue;
  static constexpr std::size_t none = plan_type::none;
  static constexpr bool graphs = Graphs;

  /// `slots` (slots_type::check_counts) up to `max_slots` on `device`, from `arena`.
  step_core(std::size_t slots, std::size_t max_slots, int device, pinned_arena<B>& arena,
            const step_slot_ops<Epilogue>& slot_ops)
      : slots_(slots, max_slots, device, arena, slot_ops) {}
  step_core(const step_core&) = delete;
  step_core& operator=(const step_core&) = delete;

  // ---- the plan --------------------------------------------------------------------------------

  /// The plan, for the batch's declarations (each refuses once the plan is fixed).
  plan_type& plan() noexcept { return plan_; }
  const plan_type& plan() const noexcept { return plan_; }

  /// The plan fixed and every initial slot allocated at its capacity (and each write target's
  /// host memory); if anything throws, the plan is not fixed and nothing is kept.
  void reserve() {
    if (plan_.frozen()) return;
    const std::size_t table = slots_.reserve(plan_);
    try {
      plan_.freeze(table, "step_batch::reserve");  // bounded by the descriptors a slot now holds
    } catch (...) {
      slots_.unreserve();  // a later reserve() or begin() starts over
      throw;
    }
  }
  [[nodiscard]] bool reserved() const noexcept { return plan_.frozen(); }

  // ---- a step ----------------------------------------------------------------------------------

  /// ferry::error while a step is open; the plan reserved; then a slot (step_slots::acquire: a
  /// wait, or ferry::capacity_error with nothing changed, when the ring is full), emptied: the
  /// open step's.
  void begin() {
    if (open_) throw error("ferry: step_batch::begin: the step begun before was neither submitted nor cancelled");
    reserve();
    slot_ = slots_.acquire(plan_);
    contents_ = slots_.contents_of(slot_);
    plan_.clear_step();
    open_ = true;
  }

  /// The open step's records dropped and its slot handed back to the ring, to be taken again by
  /// the next begin(); outside a step nothing happens.
  void cancel() noexcept {
    if (!open_) return;
    plan_.clear_step();
    slots_.cancel();
    open_ = false;
  }

  /// The open step submitted on `s` (switched to the batch's device, its stream checked): one
  /// launch of the step kernel, or under launch::graph one replay of the batch's graph.
  FERRY_KERNEL_VISIBILITY void submit(stream_ref<B> s) {
    [[maybe_unused]] const auto on_device = ops::enter(s, slots_.device());
    enqueue_step("submit", s, [&](const void* table, std::size_t blocks) {
      if constexpr (Graphs)
        step_ops<B>::replay(s, slots_.graph());
      else
        step_ops<B>::template launch<Epilogue>(s, table, blocks, slots_.lane_of(slot_), plan_.epilogue());
    });
  }
  /// As submit(), the launch being `launch(graph)` (launch::graph: the engine launches the batch's
  /// graph, e.g. as a child node of its own).
  template <class Launch>
  FERRY_KERNEL_VISIBILITY void submit_with(stream_ref<B> s, Launch&& launch) {
    [[maybe_unused]] const auto on_device = ops::enter(s, slots_.device());
    enqueue_step("submit", s, [&](const void*, std::size_t) { launch(slots_.graph()); });
  }

  /// submit()'s work around `enqueue(table, blocks)`, which enqueues the step (the step kernel over
  /// `blocks` blocks, at least one, reading the table at `table`, mapped) on `s` under the reuse
  /// core's lock; without the stream's checks and device switch (no CUDA call of its own:
  /// launch::capture's commit, whose `s` is the batch's own line, on which nothing is launched).
  /// Everything that can throw (the checks, the GrowthPolicy's answers, a table regrown, room for
  /// the stamps) comes before the enqueue, so that a submit that throws has enqueued nothing and
  /// leaves the step open; after it nothing throws, except the marking itself, which then
  /// abandons what the step reads (step_slots::abandon). `what` names the call for its errors.
  template <class Enqueue>
  FERRY_KERNEL_VISIBILITY void enqueue_step(const char* what, stream_ref<B> s, Enqueue&& enqueue) {
    check_open(what);
    plan_.check_step();
    const auto z = plan_.resolve_and_measure(contents_);
    slots_.fit_table(slot_, z.descs, plan_);
    const std::size_t want_content = slots_.prepare_commit(z.bytes);
    plan_.place_scatters(contents_);
    const auto [at, step] = slots_.table_of(slot_, steps_);
    plan_.encode(at, slots_.table_capacity(slot_), step, steps_);
    auto* header = reinterpret_cast<step_header*>(at);
    const void* table = ops::mapped(at);
    const std::size_t blocks = std::max<std::size_t>(z.descs, 1);
    bool enqueued = false;
    stamp done;
    try {
      done = shared_timeline<B>().mark_with(s, [&](const kernel_mark& m) {
        header->counter = reinterpret_cast<std::uintptr_t>(m.counter);
        header->value = m.value;
        enqueue(table, blocks);
        enqueued = true;
      });
    } catch (...) {
      if (enqueued) {  // the step counts as submitted; what it reads is leaked
        slots_.abandon();
        open_ = false;
        ++steps_;
      }
      throw;
    }
    slots_.commit(done, z.published, want_content);
    last_descs_ = z.descs;
    open_ = false;
    ++steps_;
  }

  /// Work enqueued on `s` so far reads the last submitted step's publishes: its slot is stamped as
  /// the ReusePolicy asks.
  void record_use(stream_ref<B> s) {
    [[maybe_unused]] const auto on_device = ops::enter(s, slots_.device());
    slots_.record_use(s);
  }

  /// The batch's end (destruction, or an assignment over it): its handles end, its open step is
  /// dropped, and every slot is given back (step_slots::close). Whether nothing was leaked.
  bool close() noexcept {
    dead_ = true;
    open_ = false;
    return slots_.close(steps_);
  }

  // ---- the handles' calls: the open step's records, its contents placed in its slot -------------

  std::byte* upload_span(std::size_t i, std::size_t n, std::size_t elem) {
    check_open("upload::span");
    return plan_.upload_span(contents_, i, n, elem);
  }
  std::byte* publish_span(std::size_t i, std::size_t n, std::size_t elem) {
    check_open("publish::span");
    return plan_.publish_span(contents_, i, n, elem);
  }
  std::int32_t* gather_indices(std::size_t i, std::size_t n) {
    check_open("gather::indices");
    return plan_.gather_indices(contents_, i, n);
  }
  std::byte* gather_values(std::size_t i) {
    check_open("gather::host_values");
    return plan_.gather_values(contents_, i);
  }
  template <class T, class R>
  void stage_write(std::size_t i, std::size_t row, std::size_t start, R&& src) {
    check_open("writes::stage_write");
    plan_.template stage_write<T>(contents_, i, row, start, std::forward<R>(src));
  }

  // ---- reading ---------------------------------------------------------------------------------

  /// The checked views' generation of the open (or last) step's slot; null before the first.
  [[nodiscard]] slot_generation* generation() noexcept { return slots_.generation(); }
  [[nodiscard]] bool dead() const noexcept { return dead_; }
  [[nodiscard]] bool open() const noexcept { return open_; }
  [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }
  [[nodiscard]] std::size_t slots() const noexcept { return slots_.size(); }
  [[nodiscard]] std::size_t max_slots() const noexcept { return slots_.max_slots(); }
  [[nodiscard]] int device() const noexcept { return slots_.device(); }
  /// The last submitted step's descriptors (detail::step_batch_access).
  [[nodiscard]] std::size_t last_descriptors() const noexcept { return last_descs_; }
  [[nodiscard]] step_stats stats() const noexcept {
    const ring_counts c = slots_.counts();
    return {.steps = steps_, .slots = slots_.size(), .max_slots = slots_.max_slots(), .full_waits = c.waits,
            .inserted = c.inserted, .grows = slots_.grows()};
  }
  /// launch::graph and launch::capture: the batch's tables, lane and first step (step_slots).
  [[nodiscard]] const slots_type& slot_state() const noexcept { return slots_; }

 private:
  void check_open(const char* what) const {
    if (!open_)
      throw error(std::string("ferry: step_batch: ") + what +
                  " outside a step; call begin() first (and submit() once the step is filled)");
  }

  using contents = typename slots_type::contents;
  using ops = backend_ops<B>;

  plan_type plan_;
  slots_type slots_;
  contents contents_;         // the open step's, in its slot
  std::size_t slot_ = none;   // the open (or last) step's slot
  bool open_ = false;
  bool dead_ = false;         // the batch was destroyed or assigned over: its handles throw
  std::uint64_t steps_ = 0;
  std::size_t last_descs_ = 0;
};

}  // namespace ferry::detail
