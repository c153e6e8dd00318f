// Benchmark support: the two ways a hand-written step or upload keeps a pinned slot from being
// rewritten while the GPU still reads it, each doing no more host work than ferry does for the same
// job (SPEC §10: a floor is the least work, and a peer runs at its best):
//  - event_ring: slots fenced by a CUDA event recorded after their use, the queries amortized as
//    ferry's arena amortizes them (about one per 32 uses: SPEC §2), for copies and for peers that
//    have no kernel of their own to mark the slot (libtorch);
//  - counter_ring: slots fenced by a counter that the step's own kernel stores into mapped memory
//    (the step's number + 1, in stream order), the slot chosen from the cached counter as ferry's
//    step_batch chooses it, the counter loaded only when the cached value does not show a slot free.
// Plain host C++ over the CUDA runtime: used by the .cu benchmarks and by the libtorch peers alike.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry_bench {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Up to `capacity` slots (indices), each fenced by an event recorded after its last use. acquire()
/// hands out a slot known to be free, the one freed last first (still in the host's caches);
/// it asks the GPU (cudaEventQuery) only when it knows of none, or once every `query_every`
/// acquires: the newest use first, whose completion frees every slot (one stream: events complete
/// in order), else the middle one, which frees the older half. With none free a slot not used
/// so far joins the ring (as ferry's arena hands out a reserved block); at capacity the host
/// waits for the oldest use. release(stream) records the acquired slot's event: one
/// cudaEventRecord per use, as ferry.
class event_ring {
 public:
  explicit event_ring(std::size_t capacity, std::size_t query_every = 32)
      : events_(capacity, nullptr), busy_(capacity), every_(query_every) {
    for (auto& e : events_) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    free_.reserve(capacity);
  }
  event_ring(const event_ring&) = delete;
  event_ring& operator=(const event_ring&) = delete;
  ~event_ring() {
    for (auto e : events_) {
      cudaEventSynchronize(e);
      cudaEventDestroy(e);
    }
  }

  /// A slot free to write.
  std::size_t acquire() {
    if (free_.empty() || ++unasked_ >= every_) retire();
    if (free_.empty()) {
      if (made_ < events_.size()) {
        free_.push_back(made_++);
      } else {
        check_cuda(cudaEventSynchronize(events_[busy(0)]), "cudaEventSynchronize");
        pop(1);
      }
    }
    current_ = free_.back();
    free_.pop_back();
    return current_;
  }
  /// The acquired slot's use ends at this point of `s`.
  void release(cudaStream_t s) {
    check_cuda(cudaEventRecord(events_[current_], s), "cudaEventRecord");
    busy_[(head_ + count_++) % busy_.size()] = current_;
  }
  /// Slots used so far.
  [[nodiscard]] std::size_t size() const noexcept { return made_; }

 private:
  std::size_t busy(std::size_t i) const { return busy_[(head_ + i) % busy_.size()]; }
  bool done(std::size_t i) {  // the i-th oldest use has completed
    const cudaError_t q = cudaEventQuery(events_[busy(i)]);
    if (q != cudaErrorNotReady) check_cuda(q, "cudaEventQuery");
    return q == cudaSuccess;
  }
  void pop(std::size_t n) {  // the n oldest uses completed: their slots are free, the newest taken first
    for (std::size_t i = 0; i < n; ++i) free_.push_back(busy(i));
    head_ = (head_ + n) % busy_.size();
    count_ -= n;
  }
  void retire() {
    unasked_ = 0;
    if (count_ > 0 && done(count_ - 1)) pop(count_);
    else if (count_ > 2 && done(count_ / 2)) pop(count_ / 2 + 1);
  }

  std::vector<cudaEvent_t> events_;
  std::vector<std::size_t> free_;  // known free, the one freed last at the back
  std::vector<std::size_t> busy_;  // a circular FIFO of the slots in use, oldest at head_
  std::size_t head_ = 0, count_ = 0, made_ = 0, current_ = 0, unasked_ = 0, every_;
};

/// The slot choice of a ring whose step kernel stores the step's number + 1 into `counter` (mapped
/// host memory) as its last act: up to `max` slots, `initial` at first. next(seq) returns the slot
/// for step seq - 1: the slot of the step before the last when the cached counter shows it passed
/// (two warm slots while the GPU keeps up), else the next slot of the ring if it passed (the
/// counter loaded only when the cache does not show it), else a slot not used so far, else the
/// host waits for the next slot. Steps in flight hold distinct slots.
class counter_ring {
 public:
  counter_ring(const volatile std::uint64_t* counter, unsigned initial, unsigned max)
      : counter_(counter), last_(std::max(initial, max), 0), max_(static_cast<unsigned>(last_.size())),
        active_(initial), cur_(initial - 1), before_(initial - 1) {}

  /// The slot of the step numbered seq - 1 (seq: what its kernel will store).
  unsigned next(std::uint64_t seq) {
    const unsigned nxt = (cur_ + 1) % active_;
    const bool warm = before_ != cur_;
    unsigned k;
    if (warm && last_[before_] <= known_) k = before_;
    else if (passed(last_[nxt])) k = nxt;
    else if (warm && last_[before_] <= known_) k = before_;  // the load above moved the cache
    else if (active_ < max_) k = active_++;
    else {
      while (!passed(last_[nxt])) {
      }
      k = nxt;
    }
    last_[k] = seq;
    before_ = cur_;
    cur_ = k;
    return k;
  }
  /// The slot of the last step.
  [[nodiscard]] unsigned current() const noexcept { return cur_; }
  /// Slots in the ring so far.
  [[nodiscard]] unsigned active() const noexcept { return active_; }
  [[nodiscard]] unsigned capacity() const noexcept { return max_; }

 private:
  bool passed(std::uint64_t n) {
    if (n > known_) known_ = *counter_;
    return n <= known_;
  }
  const volatile std::uint64_t* counter_;
  std::vector<std::uint64_t> last_;  // per slot: its last step's number + 1 (0: none)
  unsigned max_, active_, cur_, before_;
  std::uint64_t known_ = 0;  // the counter as last loaded
};

}  // namespace ferry_bench
