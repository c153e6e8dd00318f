// ferry/step/detail/step_capture.hpp: launch::capture, a step_batch whose step kernel is recorded
// into the engine's own stream capture and whose steps are committed with no CUDA call: the
// batch's line (a stream of its own on which nothing is launched: its reuse-core line carries the
// commits' kernel marks, so that a slot is rewritten only once the replay that read it has marked
// it passed), the capture_status the replays report into (plan.hpp: the commit protocol, shared by
// the step kernel and the host runner), record(), commit() (submit's work, published by a store),
// the checks that the next host call makes, and the host backend's stand-in for a replay.
//
// Under launch::capture the batch's slots are launch::graph's: a ring of tables found through the
// batch lane's step counter (step_slots, `Graphs`), on the host backend too (its counter is the
// status's `ran` word there). The step's work is the core's (step_core::enqueue_step).
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/detail/step_core.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace ferry::detail {

/// What a step_batch of another LaunchPolicy holds in place of its capture state.
struct no_capture {};

/// The capture state of a step_batch over backend B with state `Core` (a step_core with `Graphs`).
/// Held by the batch; not movable (the batch holds it through a pointer).
template <class B, class Core>
class step_capture {
  using core = Core;
  static constexpr bool host = std::is_same_v<B, backend::host>;
  static_assert(Core::graphs, "launch::capture finds each step's table through the batch's step counter");

 public:
  /// The status block (from `arena`) and the line; on CUDA the line's mapped counter is proven
  /// there now (a kernel mark made once), so that no commit allocates or calls CUDA.
  explicit step_capture(pinned_arena<B>& arena) : arena_(&arena), status_(arena.acquire(sizeof(capture_status))) {
    std::memset(status_.data, 0, sizeof(capture_status));
    if constexpr (!host) {
      bool counted = false;
      try {
        (void)shared_timeline<B>().mark_with(line_, [&](const kernel_mark& m) { counted = m.counter != nullptr; });
      } catch (...) {
        arena_->release(status_);
        throw;
      }
      if (!counted) {
        arena_->release(status_);
        throw capacity_error(
            "ferry: step_batch (launch::capture): no line of the reuse core with a mapped counter is free "
            "for the batch's commits (every one of them is held by a stream with work pending)");
      }
    }
  }
  step_capture(const step_capture&) = delete;
  step_capture& operator=(const step_capture&) = delete;
  ~step_capture() {
    if (!leaked_) arena_->release(status_);
  }

  /// The batch's end, around the core's (step_core::close): on the host backend the commits'
  /// waits end first (they see every step run); the status block stays (leaked) when a slot could
  /// not be waited for, since a replay may still report into it.
  void close(core& k) noexcept {
    if constexpr (host) {
      store_word(&status()->ran, ~std::uint64_t{0});
      std::atomic_ref<std::uint64_t>(status()->ran).notify_all();
    }
    leaked_ = !k.close();
  }

  /// What begin(), commit() and record() check first: ferry::error when a replay has found no
  /// committed step (the first one, named by the step it was to run).
  void check(const core& k, const char* what) const {
    if (const std::uint64_t m = load_word(&status()->missed); m != 0) [[unlikely]]
      throw_missed(k, what, m - 1 - k.slot_state().first_step());
  }

  /// begin() under launch::capture: check(), then the slot; a full ring whose wait ends past its
  /// bound (or, under throw_when_full, a full ring) names the committed steps no replay ran yet.
  void begin(core& k) {
    check(k, "begin");
    try {
      k.begin();
    } catch (const timeout_error& e) {
      throw timeout_error(std::string(e.what()) + behind_text(k));
    } catch (const capacity_error& e) {
      if (behind(k) == 0) throw;
      throw capacity_error(std::string(e.what()) + behind_text(k));
    }
  }

  /// commit(): submit()'s work (checks, growth of nothing: growth::fixed, the encoding into the
  /// ring's table for the step counter's value it runs at, the slots' stamps) with the commit's
  /// kernel mark on the batch's line, then the step named in its table's header (a release
  /// store): from there the engine's next replay runs it. No CUDA call.
  void commit(core& k) {
    check(k, "commit");
    k.enqueue_step("commit", stream_ref<B>(line_), [&](const void* table, std::size_t) { publish(table); });
  }

#if FERRY_HAS_CUDA
  /// record() on CUDA: the step kernel (with the plan's epilogue), finding its table through the
  /// batch's step counter and reporting into the status, launched on `s`, which must be capturing.
  void record(core& k, stream_ref<B> s) {
    check(k, "record");
    if (!k.reserved())
      throw error("ferry: step_batch::record: call reserve() before the capture begins (record() allocates "
                  "nothing, and a capture forbids allocation)");
    const auto h = checked(s);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    FERRY_CUDA_CHECK(cudaStreamIsCapturing(h, &capturing));
    if (capturing != cudaStreamCaptureStatusActive)
      throw error("ferry: step_batch::record: the stream is not capturing; record() records the step into the "
                  "engine's stream capture (between cudaStreamBeginCapture and cudaStreamEndCapture, or inside "
                  "torch.cuda.graph); outside a capture use a launch::kernel or launch::graph batch");
    // Only a device the reference carries is compared: asking the runtime about a capturing
    // stream (cudaStreamGetDevice) fails and invalidates the engine's capture. A stream of another
    // device that carries none fails at the launch below, with the batch's device current.
    if (const int d = s.known_device(); d >= 0 && d != k.device())
      throw error("ferry: step_batch::record: the stream belongs to device " + std::to_string(d) +
                  " but the batch was made on device " + std::to_string(k.device()));
    const device_scope on_device(k.device());
    step_ops<B>::template record<typename core::epilogue_type>(s, locator(k), k.slot_state().table_wanted(),
                                                                k.plan().epilogue());
  }
#endif

  /// The host backend's stand-in for a replay of the engine's graph: enqueues on `s` what the
  /// recorded kernel does (run_recorded_now: the protocol, with the host's step work), ending once
  /// the step's mark has passed (its wait on the line has ended), as the kernel ends after
  /// storing it. Nothing is checked here, as nothing is at a replay; the batch must outlive the
  /// work.
  void replay(const core& k, stream_ref<B> s) const {
    if (!k.reserved())
      throw error("ferry: step_batch::replay_recorded: call reserve() first (the recorded step's tables are "
                  "made there)");
    enqueue_host(s, [at = locator(k), line = checked(line_)] {
      // The line holds one wait per commit: the wait of the step ran is its task number `ran`.
      if (const std::uint64_t ran = run_recorded_now<typename core::epilogue_type>(at)) line->wait_for(ran);
    });
  }

  /// Committed steps that a replay has run (a load of the status).
  [[nodiscard]] std::uint64_t replayed(const core& k) const noexcept {
    const std::uint64_t ran = load_word(&status()->ran);
    return ran == 0 ? 0 : ran - k.slot_state().first_step();  // the counter's value after a run is never 0
  }
  /// Committed steps that no replay has run yet.
  [[nodiscard]] std::uint64_t behind(const core& k) const noexcept { return k.steps() - replayed(k); }

  /// check_replayed(): check(), then ferry::error when a committed step has not been run.
  void check_replayed(const core& k) const {
    check(k, "check_replayed");
    if (const std::uint64_t n = behind(k); n != 0)
      throw error("ferry: step_batch::check_replayed: step " + std::to_string(k.steps() - n) + " was committed " +
                  "but no replay has run it (" + std::to_string(n) + " committed step" + (n == 1 ? "" : "s") +
                  " not run, of " + std::to_string(k.steps()) + "): a commit without a replay (commit() called " +
                  "more often than the engine's graph was replayed), or replays not yet run (call this once the "
                  "stream the replays run on has been synchronized)");
  }

 private:
  capture_status* status() const noexcept { return reinterpret_cast<capture_status*>(status_.data); }

  /// Where the recorded kernel (or the host runner) finds the batch's tables, lane and status.
  step_locator locator(const core& k) const noexcept {
    return k.slot_state().locator(reinterpret_cast<std::uintptr_t>(backend_ops<B>::mapped(status_.data)));
  }

  /// The commit of the encoded step whose table is at `table` (under the reuse core's lock, its
  /// kernel mark in the header): on the host backend the stamp's wait for the replay that runs
  /// it is enqueued on the line; on CUDA the mark must be a counter the kernel stores. Then the
  /// step is named in the header. If anything throws, the table names no step.
  void publish(const void* table) {
    auto* h = static_cast<step_header*>(const_cast<void*>(table));
    const std::uint64_t step = h->step;  // encode()'s: the counter's value the step runs at
    try {
      if constexpr (host) {
        enqueue_host(line_, [st = status(), step] {
          // The host backend's kernel mark: this task ends once a replay has run the step (or
          // the batch closes), and the stamp after it passes then.
          std::atomic_ref<std::uint64_t> ran(st->ran);
          constexpr auto acquire = std::memory_order_acquire;
          for (std::uint64_t r = ran.load(acquire); r <= step; r = ran.load(acquire)) ran.wait(r, acquire);
        });
      } else if (h->counter == 0) {
        throw capacity_error("ferry: step_batch::commit: the batch's line has no mapped counter any more (every "
                             "counted line of the reuse core is held by streams with work pending); nothing "
                             "committed");
      }
    } catch (...) {
      store_word(&h->step, ~std::uint64_t{0});
      throw;
    }
    store_word(&h->step, step);
  }

  std::string behind_text(const core& k) const {
    const std::uint64_t n = behind(k);
    if (n == 0) return {};
    return "; under launch::capture " + std::to_string(n) + " committed step" + (n == 1 ? "" : "s") +
           " (from step " + std::to_string(k.steps() - n) + (n == 1 ? ") has" : ") have") +
           " not been run by a replay: a commit without " +
           "a replay (commit() called more often than the engine's graph was replayed), or replays that stalled";
  }

  [[noreturn]] FERRY_COLD static void throw_missed(const core& k, const char* what, std::uint64_t step) {
    throw error(std::string("ferry: step_batch::") + what + ": a replay of the engine's graph found no committed " +
                "step (a replay without a commit): the replay that was to run step " + std::to_string(step) +
                " found it not committed (" + std::to_string(k.steps()) + " steps committed), did none of the " +
                "step's work and ran no epilogue, so the graph's later nodes read the inputs of the step before; " +
                "the batch's steps and the engine's replays no longer pair: destroy the batch and record a new one");
  }

  stream<B> line_;  // the commits' line of the reuse core, nothing launched on it (made first)
  pinned_arena<B>* arena_;
  pinned_block status_;  // capture_status, mapped
  bool leaked_ = false;
};

}  // namespace ferry::detail
