// ferry/backend/detail/fence_clock.hpp: fences, the one mechanism by which ferry knows that a
// stream has passed a point of use, kept cheap for hot paths.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/detail/ring.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ferry::detail {

/// A point in one stream's work. seq == 0 is "no fence": always passed.
struct fence {
  std::uint32_t timeline = 0;
  std::uint64_t seq = 0;
  [[nodiscard]] bool empty() const noexcept { return seq == 0; }
};

/// Records fences on streams and answers "has the stream passed this fence?".
///
/// Within one stream, fences complete in order, so each stream is a timeline with a sequence
/// counter and a watermark `known`: every fence at or below it is known to be passed, and
/// answering for those costs nothing. Only a fence above the watermark asks the backend, and one
/// answer raises the watermark for all earlier fences at once. On the host backend that ask is an
/// atomic load of the queue's completion counter; on CUDA it is cudaEventQuery, dearer than a small
/// copy (docs/design.md, "Fences"), so owners ask only when a resource comes back into use and is
/// not already known free.
/// Not thread-safe: its owner serializes access.
template <class B>
class fence_clock;

/// Host: a timeline per queue, holding the queue weakly and its completion counter strongly, so
/// that a clock (e.g. the default arena's) keeps neither a destroyed stream's queue nor its worker,
/// and "passed?" stays one atomic load. A queue goes only once drained, so its counter's last value
/// passes all its fences. A timeline whose queue is gone is recycled for a new queue, numbering
/// continued above every fence it gave out: a fence is the timeline's base plus a task number.
template <>
class fence_clock<backend::host> {
 public:
  fence record(stream_ref<backend::host> s) {
    host_queue* q = checked(s);
    const std::uint32_t i = timeline_of(q);
    auto& t = timelines_[i];
    t.last = t.base + q->enqueued();
    return {i, t.last};
  }
  [[nodiscard]] bool passed(fence f) const noexcept {
    if (f.empty()) return true;
    const auto& t = timelines_[f.timeline];
    return f.seq <= t.base + t.completed->load(std::memory_order_acquire);
  }
  void wait(fence f) const {
    if (passed(f)) return;
    const auto& t = timelines_[f.timeline];
    if (const auto q = t.queue.lock()) q->wait_for(f.seq - t.base);  // else gone, so drained
  }
  /// True when `f` is known passed without asking the backend (host: same as passed()).
  [[nodiscard]] bool known(fence f) const noexcept { return passed(f); }
  /// Asks about `f` alone (not the newest fence first): for owners that choose which fence to
  /// ask about, e.g. one in the middle of a FIFO of slots, so that one answer frees many.
  [[nodiscard]] bool query(fence f) const noexcept { return passed(f); }

 private:
  struct timeline {
    std::weak_ptr<host_queue> queue;
    std::shared_ptr<const std::atomic<std::uint64_t>> completed;  // the queue's completion()
    const host_queue* id;    // compared only while `queue` lives (an address may be reused)
    std::uint64_t base = 0;  // every fence at or below it has passed
    std::uint64_t last = 0;  // the newest fence given out
  };

  // The timeline of `q`: its own, else one whose queue is gone, else a new one.
  std::uint32_t timeline_of(host_queue* q) {
    std::uint32_t i = 0;
    while (i < timelines_.size() && (timelines_[i].id != q || timelines_[i].queue.expired())) ++i;
    if (i < timelines_.size()) return i;
    for (i = 0; i < timelines_.size(); ++i) {
      auto& t = timelines_[i];
      if (t.queue.expired()) {
        t = timeline{q->weak_from_this(), q->completion(), q, t.last, t.last};
        return i;
      }
    }
    timelines_.push_back(timeline{q->weak_from_this(), q->completion(), q, 0, 0});
    return static_cast<std::uint32_t>(timelines_.size() - 1);
  }

  std::vector<timeline> timelines_;
};

#if FERRY_HAS_CUDA
/// CUDA: a timeline per stream, identified by cudaStreamGetId (unique for the process's
/// lifetime, so a destroyed stream whose handle is reused, or the legacy stream of another
/// device, never shares a timeline), fences as CUDA events created on the stream's device (an
/// event records only on a stream of its own device; one clock, e.g. a portable arena's, serves
/// streams of every device). A timeline whose fences have all passed is recycled for a new
/// stream, its numbering continued, so that the table stays small when streams come and go.
template <>
class fence_clock<backend::cuda> {
 public:
  fence_clock() = default;
  fence_clock(const fence_clock&) = delete;
  fence_clock& operator=(const fence_clock&) = delete;
  fence_clock(fence_clock&& o) noexcept
      : timelines_(std::move(o.timelines_)), spare_(std::move(o.spare_)) {}
  fence_clock& operator=(fence_clock&& o) noexcept {
    std::swap(timelines_, o.timelines_);
    std::swap(spare_, o.spare_);
    return *this;
  }
  ~fence_clock() {
    for (auto& t : timelines_)
      while (!t.pending.empty()) cudaEventDestroy(t.pending.pop_front().second);
    for (auto& e : spare_) cudaEventDestroy(e.event);
  }

  fence record(stream_ref<backend::cuda> s) {
    unsigned long long id = 0;
    FERRY_CUDA_CHECK(cudaStreamGetId(s.get(), &id));
    const std::uint32_t i = timeline_of(id, s);
    auto& t = timelines_[i];
    cudaEvent_t ev = take_spare(t.device);
    if (!ev) {
      const device_scope on_device(t.device);
      FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
    if (const cudaError_t r = cudaEventRecord(ev, s.get()); r != cudaSuccess) {
      spare_.push_back({t.device, ev});
      throw_cuda(r, "cudaEventRecord(fence)", __FILE__, __LINE__);
    }
    t.pending.push_back({++t.next, ev});
    return {i, t.next};
  }

  [[nodiscard]] bool passed(fence f) {
    if (f.empty()) return true;
    auto& t = timelines_[f.timeline];
    if (f.seq <= t.known) return true;
    // Ask about the newest fence first: when the stream has caught up, one query retires all.
    if (query(t.pending.back().second)) {
      retire(t, t.pending.back().first);
      return true;
    }
    if (f.seq == t.pending.back().first) return false;
    if (query(find(t, f.seq))) {
      retire(t, f.seq);
      return true;
    }
    return false;
  }

  /// True when `f` is at or below the watermark: known passed, no backend call.
  [[nodiscard]] bool known(fence f) const noexcept {
    return f.empty() || f.seq <= timelines_[f.timeline].known;
  }
  /// Asks about `f` alone (one cudaEventQuery unless already known), not the newest fence first:
  /// for owners that choose which fence to ask about, e.g. one in the middle of a FIFO of slots,
  /// so that one answer frees many.
  [[nodiscard]] bool query(fence f) {
    if (known(f)) return true;
    auto& t = timelines_[f.timeline];
    if (!query(find(t, f.seq))) return false;
    retire(t, f.seq);
    return true;
  }

  void wait(fence f) {
    if (passed(f)) return;
    auto& t = timelines_[f.timeline];
    count(counters<backend::cuda>().synchronizations);
    FERRY_CUDA_CHECK(cudaEventSynchronize(find(t, f.seq)));
    retire(t, f.seq);
  }

 private:
  struct timeline {
    unsigned long long stream_id;
    int device;
    std::uint64_t next = 0;
    std::uint64_t known = 0;
    ring<std::pair<std::uint64_t, cudaEvent_t>> pending;  // reuses its storage: no allocation in steady state
  };
  struct spare_event {
    int device;
    cudaEvent_t event;
  };

  // The timeline of stream `id`: its own, else a recycled one (all its fences passed: every old
  // fence stays at or below `known`, and numbering goes on above it), else a new one.
  std::uint32_t timeline_of(unsigned long long id, stream_ref<backend::cuda> s) {
    std::uint32_t i = 0;
    while (i < timelines_.size() && timelines_[i].stream_id != id) ++i;
    if (i < timelines_.size()) return i;
    int device = 0;
    FERRY_CUDA_CHECK(cudaStreamGetDevice(s.get(), &device));
    if (timelines_.size() >= recycle_from) {
      for (i = 0; i < timelines_.size(); ++i) {
        auto& t = timelines_[i];
        if (t.pending.empty()) {
          t.stream_id = id;
          t.device = device;
          return i;
        }
      }
    }
    timelines_.push_back(timeline{id, device, 0, 0, {}});
    return static_cast<std::uint32_t>(timelines_.size() - 1);
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
  static bool query(cudaEvent_t ev) {
    const cudaError_t r = cudaEventQuery(ev);
    if (r == cudaErrorNotReady) return false;
    FERRY_CUDA_CHECK(r);
    return true;
  }
  static cudaEvent_t find(const timeline& t, std::uint64_t seq) {
    // pending holds consecutive sequence numbers known+1 .. next.
    return t.pending[static_cast<std::size_t>(seq - t.pending.front().first)].second;
  }
  void retire(timeline& t, std::uint64_t seq) {
    while (!t.pending.empty() && t.pending.front().first <= seq) {
      spare_.push_back({t.device, t.pending.front().second});
      t.pending.pop_front();
    }
    t.known = std::max(t.known, seq);
  }

  static constexpr std::size_t recycle_from = 4;  // streams one clock usually serves
  std::vector<timeline> timelines_;
  std::vector<spare_event> spare_;
};
#endif

}  // namespace ferry::detail
