// ferry/backend/event.hpp: event<B>, a point in a stream's work that the host can test or wait
// for, and that other streams can wait on.
#pragma once

#include <ferry/backend/stream.hpp>

#include <cstdint>
#include <memory>
#include <utility>

namespace ferry {

/// Host backend: an event is (queue, sequence number) — recording it is free and testing it is
/// one atomic load. The event shares ownership of the queue object, not of its worker thread:
/// destroying the stream still ends the worker, and the event then reads as ready.
template <>
class event<backend::host> {
 public:
  event() = default;

  /// Marks the current end of `s`'s work.
  void record(stream_ref<backend::host> s) {
    queue_ = detail::checked(s)->shared_from_this();
    seq_ = queue_->enqueued();
  }
  /// True once every task enqueued before record() has run (true if never recorded).
  [[nodiscard]] bool ready() const noexcept { return !queue_ || queue_->completed() >= seq_; }
  /// Blocks until ready(); rethrows (once) the first error raised by the recorded stream's work
  /// before record() (a later error is left to synchronizing calls ordered after it).
  void synchronize() const {
    if (!queue_) return;
    detail::count(detail::counters<backend::host>().synchronizations);
    queue_->wait_for(seq_);
    detail::rethrow_if(queue_->take_error(seq_));
  }

 private:
  friend class stream_ref<backend::host>;
  std::shared_ptr<detail::host_queue> queue_;
  std::uint64_t seq_ = 0;
};

inline void stream_ref<backend::host>::wait(const event<backend::host>& e) const {
  detail::host_queue* self = detail::checked(*this);
  if (e.ready()) return;
  auto q = e.queue_;
  auto seq = e.seq_;
  if (q.get() == self) return;  // a stream is always ordered after its own earlier work
  self->enqueue([q = std::move(q), seq] { q->wait_for(seq); });
}

#if FERRY_HAS_CUDA
/// CUDA backend: a cudaEvent_t created with timing disabled (cheapest to record).
template <>
class event<backend::cuda> {
 public:
  /// Creates the event (cudaEventDisableTiming).
  event() { FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  /// Takes over `o`'s event; `o` is left empty.
  event(event&& o) noexcept
      : event_(std::exchange(o.event_, nullptr)),
        stream_id_(o.stream_id_),
        host_ticket_(std::exchange(o.host_ticket_, 0)) {}
  /// Swaps events with `o`.
  event& operator=(event&& o) noexcept {
    std::swap(event_, o.event_);
    std::swap(stream_id_, o.stream_id_);
    std::swap(host_ticket_, o.host_ticket_);
    return *this;
  }
  ~event() {
    if (event_) detail::destructor_guard([&] { FERRY_CUDA_CHECK(cudaEventDestroy(event_)); });
  }

  /// Marks the current end of `s`'s work (cudaEventRecord, about 0.3 µs).
  void record(stream_ref<backend::cuda> s) {
    const cudaStream_t handle = detail::checked(s);
    FERRY_CUDA_CHECK(cudaEventRecord(event_, handle));
    // The host functions ordered before this point: none if none was ever enqueued (no lookup).
    host_ticket_ = detail::stream_error_registry::instance().ticket();
    if (host_ticket_ != 0) stream_id_ = detail::stream_id(handle);
  }
  /// cudaEventQuery (about 1.5 µs on the H200: keep it off per-operation hot paths).
  [[nodiscard]] bool ready() const {
    const cudaError_t r = cudaEventQuery(event_);
    if (r == cudaErrorNotReady) return false;
    FERRY_CUDA_CHECK(r);
    return true;
  }
  /// Blocks until the recorded work has completed (cudaEventSynchronize); rethrows (once) the
  /// first error raised by host work enqueued on the recorded stream before record().
  void synchronize() const {
    detail::count(detail::counters<backend::cuda>().synchronizations);
    FERRY_CUDA_CHECK(cudaEventSynchronize(event_));
    if (host_ticket_ != 0)
      detail::rethrow_if(detail::stream_error_registry::instance().take(stream_id_, host_ticket_));
  }
  /// The CUDA event.
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  unsigned long long stream_id_ = 0;  // the recorded stream (cudaStreamGetId)
  std::uint64_t host_ticket_ = 0;     // the host functions ordered before record() (0: none)
};

inline void stream_ref<backend::cuda>::wait(const event<backend::cuda>& e) const {
  FERRY_CUDA_CHECK(cudaStreamWaitEvent(detail::checked(*this), e.get(), 0));
}
#endif

}  // namespace ferry
