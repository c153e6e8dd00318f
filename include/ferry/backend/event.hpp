// ferry/backend/event.hpp: event<B>, a point in a stream's work that the host can test or wait
// for, and that other streams can wait on.
#pragma once

#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>

#include <cstdint>
#include <memory>

namespace ferry {

/// Host backend: an event is a stamp of the reuse core (backend/detail/timeline.hpp): recording it
/// is free and testing it is one atomic load. It keeps neither the queue nor its worker: destroying
/// the stream still ends the worker, and the event then reads as ready.
template <>
class event<backend::host> {
 public:
  event() = default;

  /// Marks the current end of `s`'s work.
  void record(stream_ref<backend::host> s) {
    detail::host_queue* q = detail::checked(s);
    queue_ = q->weak_from_this();
    task_ = q->enqueued();  // before the mark: the errors it hands out are of work it covers
    at_ = detail::shared_timeline<backend::host>().mark(s);
  }
  /// True once every task enqueued before record() has run (true if never recorded).
  [[nodiscard]] bool ready() const { return detail::shared_timeline<backend::host>().passed(at_); }
  /// Blocks until ready(); rethrows (once) the first error raised by the recorded stream's work
  /// before record() (a later error is left to synchronizing calls ordered after it). Counts one
  /// synchronization, whether or not it had to block. Bounded (ferry::wait_timeout): past the
  /// bound, ferry::timeout_error naming the stream point, the event unchanged.
  void synchronize() const {
    if (!detail::shared_timeline<backend::host>().wait(at_))
      detail::count(detail::counters<backend::host>().synchronizations);
    if (const auto q = queue_.lock()) detail::rethrow_if(q->take_error(task_));
  }

 private:
  friend class stream_ref<backend::host>;
  detail::stamp at_;
  std::weak_ptr<detail::host_queue> queue_;  // for its errors (a destroyed stream drops them)
  std::uint64_t task_ = 0;
};

inline void stream_ref<backend::host>::wait(const event<backend::host>& e) const {
  detail::shared_timeline<backend::host>().order_after(*this, e.at_);
}

#if FERRY_HAS_CUDA
/// CUDA backend: a stamp of the reuse core (backend/detail/timeline.hpp). Recording marks the
/// stream with one of the core's pooled events (no event is created per ferry::event); ready()
/// answers from the core's watermark, querying an event only above it.
template <>
class event<backend::cuda> {
 public:
  event() = default;

  /// Marks the current end of `s`'s work.
  void record(stream_ref<backend::cuda> s) {
    at_ = detail::shared_timeline<backend::cuda>().mark(s);
    // The host functions ordered before this point: none if none was ever enqueued (no lookup).
    host_ticket_ = detail::stream_error_registry::instance().ticket();
    if (host_ticket_ != 0) stream_id_ = s.id();
  }
  /// True once the recorded work has completed (true if never recorded).
  [[nodiscard]] bool ready() const { return detail::shared_timeline<backend::cuda>().passed(at_); }
  /// Blocks until the recorded work has completed; rethrows (once) the first error raised by host
  /// work enqueued on the recorded stream before record(). Counts one synchronization, whether or
  /// not it had to block. Bounded (ferry::wait_timeout): it polls the core's event rather than
  /// calling cudaEventSynchronize, and past the bound throws ferry::timeout_error naming the
  /// stream point, the event unchanged.
  void synchronize() const {
    if (!detail::shared_timeline<backend::cuda>().wait(at_))
      detail::count(detail::counters<backend::cuda>().synchronizations);
    if (host_ticket_ != 0)
      detail::rethrow_if(detail::stream_error_registry::instance().take(stream_id_, host_ticket_));
  }

 private:
  friend class stream_ref<backend::cuda>;
  detail::stamp at_;
  unsigned long long stream_id_ = 0;  // the recorded stream (cudaStreamGetId)
  std::uint64_t host_ticket_ = 0;     // the host functions ordered before record() (0: none)
};

inline void stream_ref<backend::cuda>::wait(const event<backend::cuda>& e) const {
  detail::shared_timeline<backend::cuda>().order_after(*this, e.at_);
}
#endif

}  // namespace ferry
