// ferry/backend/detail/timeline.hpp: the reuse core. One process-wide timeline per backend answers
// "has the stream passed the point where this memory was used?" for every component (docs/design.md,
// "The reuse core").
#pragma once

#include <ferry/backend/detail/mapping.hpp>
#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/ring.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ferry::detail {

/// A point in one stream's work: `seq` on the stream's line. seq == 0: no point (always passed).
/// Within a line, points pass in order, so one answer about a point answers every earlier one.
struct stamp {
  std::uint32_t line = 0;
  std::uint64_t seq = 0;
  [[nodiscard]] bool empty() const noexcept { return seq == 0; }
};

/// "stream point (line L, seq S)": how messages name a point.
inline std::string point_name(stamp p) {
  return "stream point (line " + std::to_string(p.line) + ", seq " + std::to_string(p.seq) + ")";
}

/// How a bounded wait for a point ended.
enum class wait_result {
  passed,     ///< it had passed: nothing blocked
  waited,     ///< it passed while the host blocked (a synchronization, counted)
  timed_out,  ///< the deadline expired first; nothing changed
};

/// A wait's result, or (timed out) ferry::timeout_error naming `p`. True when the wait blocked.
inline bool waited_or_throw(wait_result r, stamp p, const wait_deadline& d) {
  if (r == wait_result::timed_out)
    throw timeout_error("ferry: the wait for " + point_name(p) + " " + timeout_text(d) + "; nothing was changed");
  return r == wait_result::waited;
}

/// Where a ferry kernel records that it is done: its last block stores `value` into `*counter`
/// (pinned, mapped) after every block has finished (`blocks_done` counts them; see
/// kernel_mark.cuh). Empty (`counter == nullptr`) on the host backend and past the lines that
/// have a counter: the kernel then stores nothing and the point is covered by an event.
struct kernel_mark {
  std::uint64_t* counter = nullptr;
  unsigned* blocks_done = nullptr;
  std::uint64_t value = 0;
};

/// The reuse core of backend B: a line per stream (keyed by stream identity, not by handle), a
/// monotone sequence per line, and a host-side watermark per line below which every point is
/// known passed. Memory handed to a stream is stamped with mark(); it may be reused once
/// passed(stamp). Answering for a stamp at or below the watermark costs one compare; above it,
/// the watermark is raised as cheaply as the backend allows (a counter that ferry's kernels write,
/// then completion events, newest first so that one answer retires many stamps). Every component
/// (pinned_arena, uva_pool, staged-write slots, the large-upload pipeline, events) is a client of
/// the one instance, shared(); none keeps a clock of its own. Thread-safe.
template <class B>
class timeline;

/// The process-wide timeline of backend B: created on first use, never destroyed (components
/// with static storage may outlive any other order of destruction).
template <class B>
timeline<B>& shared_timeline() {
  static auto* t = new timeline<B>();
  return *t;
}

/// For destructors: whether `p` passes before `d` expires. A wait that times out or fails is
/// false, counted in ferry::swallowed_errors(): what `p` guards is then leaked, never freed or
/// reused under work that may still use it.
template <class B>
bool passed_by(stamp p, wait_deadline& d) noexcept {
  bool passed = false;
  if (destructor_guard([&] { passed = shared_timeline<B>().wait_until(p, d) != wait_result::timed_out; }) &&
      !passed)
    count_swallowed_error();
  return passed;
}

// ---- host -------------------------------------------------------------------------------------

/// Host: a line per queue; a point is the queue's task count, its watermark the queue's completion
/// counter (one atomic load). The line holds the queue weakly and its counter strongly, so it
/// keeps neither a destroyed stream's queue nor its worker; a line whose queue is gone (so
/// drained) is recycled for a new queue, numbering continued above every point it gave out.
template <>
class timeline<backend::host> {
 public:
  stamp mark(stream_ref<backend::host> s) {
    host_queue* q = checked(s);
    std::lock_guard lock(mutex_);
    const std::uint32_t i = line_of(q);
    auto& l = lines_[i];
    l.last = l.base + q->enqueued();
    return {i, l.last};
  }
  /// Runs `launch(kernel_mark{})` (which enqueues the work), then marks the stream after it.
  template <class Launch>
  stamp mark_with(stream_ref<backend::host> s, Launch&& launch) {
    std::forward<Launch>(launch)(kernel_mark{});
    return mark(s);
  }
  [[nodiscard]] bool passed(stamp p) {
    if (p.empty()) return true;
    std::lock_guard lock(mutex_);
    return passed_locked(p);
  }
  [[nodiscard]] bool known(stamp p) { return passed(p); }
  /// Blocks until `p` has passed or `d` expires (a condition variable's timed wait); see
  /// wait_result. A wait that blocks is counted as a synchronization.
  wait_result wait_until(stamp p, wait_deadline& d) {
    std::shared_ptr<host_queue> q;
    std::uint64_t task = 0;
    {
      std::lock_guard lock(mutex_);
      if (p.empty() || passed_locked(p)) return wait_result::passed;
      const auto& l = lines_[p.line];
      q = l.queue.lock();
      task = p.seq - l.base;
    }
    if (!q) return wait_result::passed;  // gone, so drained
    const auto until = d.until();
    count(counters<backend::host>().synchronizations);
    return q->wait_until(task, until) ? wait_result::waited : wait_result::timed_out;
  }
  /// Blocks until `p` has passed; past `d` (by default the process-wide bound) throws
  /// ferry::timeout_error naming `p`. Returns whether it had to block.
  bool wait(stamp p, wait_deadline& d) { return waited_or_throw(wait_until(p, d), p, d); }
  bool wait(stamp p) {
    wait_deadline d;
    return wait(p, d);
  }
  /// Makes work enqueued on `s` from now on wait for `p` (the host does not block).
  void order_after(stream_ref<backend::host> s, stamp p) {
    host_queue* self = checked(s);
    std::shared_ptr<host_queue> q;
    std::uint64_t task = 0;
    {
      std::lock_guard lock(mutex_);
      if (p.empty() || passed_locked(p)) return;
      const auto& l = lines_[p.line];
      q = l.queue.lock();
      task = p.seq - l.base;
    }
    if (!q || q.get() == self) return;  // gone (drained), or the same stream: already ordered
    self->enqueue([q = std::move(q), task] { q->wait_for(task); });
  }

 private:
  struct line {
    std::weak_ptr<host_queue> queue;
    std::shared_ptr<const std::atomic<std::uint64_t>> completed;  // the queue's completion()
    const host_queue* id;    // compared only while `queue` lives (an address may be reused)
    std::uint64_t base = 0;  // every point at or below it has passed
    std::uint64_t last = 0;  // the newest point given out
  };

  bool passed_locked(stamp p) const noexcept {
    const auto& l = lines_[p.line];
    return p.seq <= l.base + l.completed->load(std::memory_order_acquire);
  }
  std::uint32_t line_of(host_queue* q) {
    std::uint32_t i = 0;
    while (i < lines_.size() && (lines_[i].id != q || lines_[i].queue.expired())) ++i;
    if (i < lines_.size()) return i;
    for (i = 0; i < lines_.size(); ++i) {
      auto& l = lines_[i];
      if (l.queue.expired()) {
        l = line{q->weak_from_this(), q->completion(), q, l.last, l.last};
        return i;
      }
    }
    lines_.push_back(line{q->weak_from_this(), q->completion(), q, 0, 0});
    return static_cast<std::uint32_t>(lines_.size() - 1);
  }

  std::mutex mutex_;
  std::vector<line> lines_;
};

// ---- CUDA -------------------------------------------------------------------------------------

#if FERRY_HAS_CUDA
/// CUDA: a line per stream, identified by its id (stream_ref::id(), unique for the process's lifetime: a
/// destroyed stream whose handle is reused, or the legacy stream of another device, never shares a
/// line). Points are made two ways:
///  - mark(): a completion event (pooled per device, never created on the hot path) recorded on
///    the stream;
///  - mark_with(): a ferry kernel launched under the lock stores the point into the line's mapped
///    counter as its last act; the host reads that counter with one load, no driver call.
/// passed(p) above the watermark reads the counter, then asks about the newest event (when the
/// GPU keeps up, one query retires the line), then about one in the middle (when it is behind,
/// one answer retires half), then about the event that covers p.
/// A line whose points have all passed is recycled for a new stream, numbering continued.
template <>
class timeline<backend::cuda> {
 public:
  timeline() = default;
  timeline(const timeline&) = delete;
  timeline& operator=(const timeline&) = delete;

  stamp mark(stream_ref<backend::cuda> s) {
    const cudaStream_t h = checked(s);
    const unsigned long long id = s.id();
    std::lock_guard lock(mutex_);
    const std::uint32_t i = line_of(id, s);
    return {i, record(lines_[i], h)};
  }

  /// Calls `launch(kernel_mark)` under the lock (so no other point of the stream is made between)
  /// and returns the point the kernel stores when done. A line without a counter gets an empty
  /// kernel_mark and an event after the launch. If `launch` throws, nothing is marked.
  template <class Launch>
  stamp mark_with(stream_ref<backend::cuda> s, Launch&& launch) {
    const cudaStream_t h = checked(s);
    const unsigned long long id = s.id();
    std::lock_guard lock(mutex_);
    const std::uint32_t i = line_of(id, s);
    auto& l = lines_[i];
    if (i >= counted_lines || !counters_ready(l.device)) {
      std::forward<Launch>(launch)(kernel_mark{});
      return {i, record(l, h)};
    }
    const std::uint64_t seq = l.next + 1;
    std::forward<Launch>(launch)(kernel_mark{counters_ + i, blocks_done_[l.device] + i, seq});
    l.next = seq;
    l.counted = seq;
    return {i, seq};
  }

  [[nodiscard]] bool passed(stamp p) {
    if (p.empty()) return true;
    std::lock_guard lock(mutex_);
    return passed_locked(lines_[p.line], p.seq);
  }
  /// True when `p` is at or below the watermark (no driver call).
  [[nodiscard]] bool known(stamp p) {
    if (p.empty()) return true;
    std::lock_guard lock(mutex_);
    return p.seq <= lines_[p.line].known;
  }

  /// Blocks until `p` has passed or `d` expires; see wait_result. A wait that blocks is counted
  /// as a synchronization (and in blocking_waits, for sync_guard). It polls, without the lock
  /// (other streams mark and ask meanwhile): the event that covers `p` with cudaEventQuery
  /// (cudaEventSynchronize cannot be given up at a deadline), else the line's mapped counter,
  /// back to back at first, then sleeping (poll_until).
  wait_result wait_until(stamp p, wait_deadline& d) {
    std::unique_lock lock(mutex_);
    if (p.empty() || passed_locked(lines_[p.line], p.seq)) return wait_result::passed;
    count(counters<backend::cuda>().synchronizations);
    ++blocking_waits;
    if (const cudaEvent_t ev = covering(lines_[p.line], p.seq)) {
      const std::uint64_t seq = covering_seq(lines_[p.line], p.seq);
      ++waiting_;  // no spare event is recorded again while ev may be one (record() creates)
      lock.unlock();
      cudaError_t r = cudaErrorNotReady;
      bool done = false;
      try {
        done = poll_until(d, [&] { return (r = cudaEventQuery(ev)) != cudaErrorNotReady; });
      } catch (...) {
        lock.lock();
        --waiting_;
        throw;
      }
      lock.lock();
      --waiting_;
      if (!done) return wait_result::timed_out;
      FERRY_CUDA_CHECK(r);
      retire(lines_[p.line], seq);
      return wait_result::waited;
    }
    // Only a kernel's counter covers p: poll it (a fault shows as an error of any driver call).
    lock.unlock();
    const bool done = poll_until(d, [&] {
      {
        std::lock_guard again(mutex_);
        if (passed_locked(lines_[p.line], p.seq)) return true;
      }
      if (const cudaError_t r = cudaStreamQuery(cudaStreamPerThread); r != cudaSuccess && r != cudaErrorNotReady)
        throw_cuda(r, "waiting for a ferry kernel", __FILE__, __LINE__);
      return false;
    });
    return done ? wait_result::waited : wait_result::timed_out;
  }
  /// Blocks until `p` has passed; past `d` (by default the process-wide bound) throws
  /// ferry::timeout_error naming `p`. Returns whether it had to block.
  bool wait(stamp p, wait_deadline& d) { return waited_or_throw(wait_until(p, d), p, d); }
  bool wait(stamp p) {
    wait_deadline d;
    return wait(p, d);
  }

  /// Recorded events not yet known passed, over every line (a diagnostic for tests).
  [[nodiscard]] std::size_t events_pending() {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& l : lines_) n += l.pending.size();
    return n;
  }

  /// Makes work enqueued on `s` from now on wait for `p` (cudaStreamWaitEvent on the event that
  /// covers it; the host does not block). A point covered by no event yet (a kernel's, with no
  /// event recorded after it) cannot get one now (its stream may be gone): the host waits instead.
  void order_after(stream_ref<backend::cuda> s, stamp p) {
    const cudaStream_t h = checked(s);
    {
      std::lock_guard lock(mutex_);
      if (p.empty() || passed_locked(lines_[p.line], p.seq)) return;
      if (const cudaEvent_t ev = covering(lines_[p.line], p.seq)) {
        FERRY_CUDA_CHECK(cudaStreamWaitEvent(h, ev, 0));
        count(counters<backend::cuda>().enqueues);
        return;
      }
    }
    wait(p);
  }

 private:
  struct line {
    unsigned long long stream_id;
    int device;
    std::uint64_t next = 0;     // the newest point given out
    std::uint64_t known = 0;    // the watermark
    std::uint64_t counted = 0;  // the newest point a kernel stores (0: none pending)
    ring<std::pair<std::uint64_t, cudaEvent_t>> pending;  // recorded events above the watermark
  };
  struct spare_event {
    int device;
    cudaEvent_t event;
  };

  // Tuning (detail/tuning.hpp): lines with a mapped counter (the rest use events only); recorded
  // events a line holds before a mark asks about them rather than create another; devices.
  static constexpr std::uint32_t counted_lines = timeline_counted_lines;
  static constexpr std::size_t reclaim_after = timeline_reclaim_after;
  static constexpr int max_devices = timeline_max_devices;

  std::uint64_t record(line& l, cudaStream_t h) {
    cudaEvent_t ev = waiting_ == 0 ? take_spare(l.device) : nullptr;
    if (!ev && waiting_ == 0 && l.pending.size() >= reclaim_after) {
      // A line marked often and seldom asked about: one answer (newest first) retires what has
      // passed, so its events are recorded again instead of created.
      (void)ask(l, l.pending.front().first);
      ev = take_spare(l.device);
    }
    if (!ev) {
      const device_scope on_device(l.device);
      FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
    if (const cudaError_t r = cudaEventRecord(ev, h); r != cudaSuccess) {
      spare_.push_back({l.device, ev});
      throw_cuda(r, "cudaEventRecord(mark)", __FILE__, __LINE__);
    }
    count(counters<backend::cuda>().enqueues);
    l.pending.push_back({++l.next, ev});
    return l.next;
  }

  bool passed_locked(line& l, std::uint64_t seq) {
    if (seq <= l.known) return true;
    if (l.counted != 0) {  // one load of what ferry's kernels stored
      const std::uint64_t c =
          std::atomic_ref<std::uint64_t>(counters_[&l - lines_.data()]).load(std::memory_order_acquire);
      if (c > l.known) retire(l, c);
      if (seq <= l.known) return true;
    }
    return ask(l, seq);
  }

  // Newest event first, then the middle of those above seq's, then seq's own.
  bool ask(line& l, std::uint64_t seq) {
    if (l.pending.empty() || l.pending.back().first < seq) return false;  // a kernel's, not yet stored
    const std::size_t last = l.pending.size() - 1;
    if (query(l.pending[last].second)) {
      retire(l, l.pending[last].first);
      return true;
    }
    const std::size_t own = index_covering(l, seq);
    if (own == last) return false;
    const std::size_t mid = own + (last - own) / 2;
    if (mid != own && query(l.pending[mid].second)) {
      retire(l, l.pending[mid].first);
      return true;
    }
    if (!query(l.pending[own].second)) return false;
    retire(l, l.pending[own].first);
    return true;
  }

  // The first pending event at or after seq (pending holds increasing points, not consecutive:
  // kernels' points carry no event).
  static std::size_t index_covering(const line& l, std::uint64_t seq) {
    std::size_t lo = 0, hi = l.pending.size() - 1;
    while (lo < hi) {
      const std::size_t m = lo + (hi - lo) / 2;
      if (l.pending[m].first < seq) lo = m + 1; else hi = m;
    }
    return lo;
  }
  static cudaEvent_t covering(const line& l, std::uint64_t seq) {
    if (l.pending.empty() || l.pending.back().first < seq) return nullptr;
    return l.pending[index_covering(l, seq)].second;
  }
  static std::uint64_t covering_seq(const line& l, std::uint64_t seq) {
    return l.pending[index_covering(l, seq)].first;
  }

  static bool query(cudaEvent_t ev) {
    count(counters<backend::cuda>().completion_queries);
    const cudaError_t r = cudaEventQuery(ev);
    if (r == cudaErrorNotReady) return false;
    FERRY_CUDA_CHECK(r);
    return true;
  }
  void retire(line& l, std::uint64_t seq) {
    while (!l.pending.empty() && l.pending.front().first <= seq) {
      spare_.push_back({l.device, l.pending.front().second});
      l.pending.pop_front();
    }
    l.known = std::max(l.known, seq);
    if (l.counted <= l.known) l.counted = 0;
  }

  // The line of stream `id`: its own, else a recycled one (every point passed), else a new one.
  std::uint32_t line_of(unsigned long long id, stream_ref<backend::cuda> s) {
    std::uint32_t i = 0;
    while (i < lines_.size() && lines_[i].stream_id != id) ++i;
    if (i < lines_.size()) return i;
    const int device = s.device();
    for (i = 0; i < lines_.size(); ++i) {
      auto& l = lines_[i];
      if (l.known == l.next) {  // recycled: old points stay at or below `known`
        l.stream_id = id;
        l.device = device;
        return i;
      }
    }
    // A recycled line may still hold the last point of its old stream unasked: try the oldest.
    for (i = 0; i < lines_.size(); ++i) {
      auto& l = lines_[i];
      if (passed_locked(l, l.next)) {
        l.stream_id = id;
        l.device = device;
        return i;
      }
    }
    lines_.push_back(line{id, device, 0, 0, 0, {}});
    return static_cast<std::uint32_t>(lines_.size() - 1);
  }

  // The mapped counters and, per device, the blocks-done counts (allocated on the first kernel
  // mark of the process and of each device; the kernels that use them are cold then anyway). None
  // on a device whose mapping the probe found dead: its kernels' stores would never show.
  bool counters_ready(int device) {
    if (device < 0 || device >= max_devices) return false;
    if (mapping_verdicts<backend::cuda>::instance().known(device) == mapping_state::dead) return false;
    if (!counters_) {
      void* p = nullptr;
      FERRY_CUDA_CHECK_ALLOC(
          cudaHostAlloc(&p, counted_lines * sizeof(std::uint64_t), cudaHostAllocMapped | cudaHostAllocPortable),
          "pinned", counted_lines * sizeof(std::uint64_t));
      std::fill_n(static_cast<std::uint64_t*>(p), counted_lines, std::uint64_t{0});
      counters_ = static_cast<std::uint64_t*>(p);
    }
    if (!blocks_done_[device]) {
      const device_scope on_device(device);
      void* p = nullptr;
      FERRY_CUDA_CHECK_ALLOC(cudaMalloc(&p, counted_lines * sizeof(unsigned)), "device",
                             counted_lines * sizeof(unsigned));
      FERRY_CUDA_CHECK(cudaMemset(p, 0, counted_lines * sizeof(unsigned)));
      blocks_done_[device] = static_cast<unsigned*>(p);
    }
    return true;
  }

  cudaEvent_t take_spare(int device) noexcept {
    for (std::size_t k = spare_.size(); k-- > 0;) {
      if (spare_[k].device != device) continue;
      const cudaEvent_t ev = spare_[k].event;
      spare_[k] = spare_.back();
      spare_.pop_back();
      return ev;
    }
    return nullptr;
  }

  std::mutex mutex_;
  std::vector<line> lines_;
  std::vector<spare_event> spare_;
  unsigned waiting_ = 0;          // threads blocked in wait() on an event they do not own
  std::uint64_t* counters_ = nullptr;
  unsigned* blocks_done_[max_devices] = {};
};
#endif

}  // namespace ferry::detail
