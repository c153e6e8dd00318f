// ferry/step/detail/step_submit.hpp: a step_batch's submit: the open step checked, measured and
// encoded into its slot's table (step_core), enqueued as one launch or replay under the reuse
// core's lock with the kernel mark in the table's header, and its slot (and the previous step's)
// stamped on the slot ring.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/detail/step_slots.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace ferry::detail {

/// Submit for the slots `Slots` (a step_slots).
template <class Slots>
struct step_submit {
  using core = typename Slots::core;
  using slot = typename Slots::slot;
  static constexpr std::size_t none = Slots::none;

  /// submit()'s work around `enqueue(slot, table, blocks)`, which launches the step's kernel over
  /// `blocks` blocks (at least one) or the graph holding it, under the reuse core's lock. Everything that can throw (the checks, the
  /// GrowthPolicy's answers, a table regrown, room for the stamps) comes before the enqueue, so
  /// that a submit that throws has enqueued nothing and leaves the step open; after it nothing
  /// throws, except the marking itself, which then abandons what the step reads (abandon()).
  template <class B, class Enqueue>
  FERRY_KERNEL_VISIBILITY static void submit(core& k, stream_ref<B> s, Enqueue&& enqueue) {
    [[maybe_unused]] const auto on_device = backend_ops<B>::enter(s, k.device_);
    publish(k, s, std::forward<Enqueue>(enqueue));
  }
  /// submit() without the stream's checks and device switch (no CUDA call of its own): the
  /// capture's commit, whose `s` is the batch's own line, on which nothing is launched.
  template <class B, class Enqueue>
  FERRY_KERNEL_VISIBILITY static void publish(core& k, stream_ref<B> s, Enqueue&& enqueue) {
    k.check_open("submit");
    auto& sl = k.slots_[k.slots_.current()];
    check_fills(k);
    k.check_gathers();
    const auto z = k.resolve_and_measure();
    const std::size_t n = z.descs;
    if (n > Slots::table_capacity(k, sl)) {
      if constexpr (Slots::fixed) {
        throw capacity_error("ferry: step_batch (growth::fixed): the step needs " + std::to_string(n) +
                             " descriptors, more than the " + std::to_string(Slots::table_capacity(k, sl)) +
                             " of its table");
      } else {
        const std::size_t want = std::max(k.want_table_, grown_capacity<typename Slots::growth>(n, sl.table_cap));
        Slots::regrow_table(k, sl, want);  // nothing changes if it throws
        k.want_table_ = want;  // a larger table in the open step's slot is all that stays if a later check throws
      }
    }
    std::size_t want_content = k.want_content_;
    if constexpr (!Slots::fixed) {
      if (z.bytes > want_content) [[unlikely]]
        want_content = Slots::grown_content(k, z.bytes);
    }
    k.slots_.reserve_commit();
    k.place_scatters();
    std::uint64_t step = 0;
    std::byte* const at = Slots::table_of(k, sl, step);
    k.encode(at, Slots::table_capacity(k, sl), step, k.steps_);
    auto* header = reinterpret_cast<step_header*>(at);
    const void* table = backend_ops<B>::mapped(at);
    const std::size_t blocks = std::max<std::size_t>(n, 1);
    bool enqueued = false;
    stamp st;
    try {
      st = shared_timeline<B>().mark_with(s, [&](const kernel_mark& m) {
        header->counter = reinterpret_cast<std::uintptr_t>(m.counter);
        header->value = m.value;
        enqueue(sl, table, blocks);
        enqueued = true;
      });
    } catch (...) {
      if (enqueued) abandon(k);
      throw;
    }
    // The kernel's mark stamps the slot, and the previous step's slot when it published (the
    // readers of its publishes are work enqueued on `s` before this step's kernel): a step that
    // published nothing has none, and its slot is free once its own kernel has run, so the host
    // may prepare a step while the one before runs. Room reserved above: no allocation, no throw.
    k.slots_.commit(st, z.published ? after_use::view : after_use::open);
    k.want_content_ = want_content;
    k.last_descs_ = n;
    k.open_ = false;
    ++k.steps_;
  }

  /// record_use(): work enqueued on `s` so far reads the last submitted step's publishes: its
  /// slot is stamped as the ReusePolicy asks.
  template <class B>
  static void record_use(core& k, stream_ref<B> s) {
    [[maybe_unused]] const auto on_device = backend_ops<B>::enter(s, k.device_);
    k.slots_.record_use(s);
  }

  /// std::out_of_range for a fill from an element its publish does not hold this step.
  static void check_fills(const core& k) {
    for (const auto& f : k.fills_) {
      if (f.publish != none && f.index >= k.publishes_[f.publish].n)
        throw std::out_of_range("ferry: step_batch::submit: a fill reads element " + std::to_string(f.index) +
                                " of a publish that holds " + std::to_string(k.publishes_[f.publish].n) +
                                " elements this step");
    }
  }

  /// The open step was enqueued but could not be stamped: its slot, and the previous step's when
  /// it published (whose readers on the stream this stamp would have covered), leave the ring
  /// without being released (slot_ring::abandon): their blocks are leaked, never rewritten under
  /// a reader. The step counts as submitted.
  static void abandon(core& k) noexcept {
    k.slots_.abandon();
    k.leaked_ = true;
    k.open_ = false;
    ++k.steps_;
  }
};

}  // namespace ferry::detail
