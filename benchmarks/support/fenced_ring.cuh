// Benchmark support: the staging ring a careful hand-written upload uses, for the correct floors of
// SPEC §10 (the small and packed uploads): pinned blocks, each fenced by an event recorded after
// the copy that reads it, and reused only once that event has completed.
#pragma once

#include "gpu.cuh"

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace ferry_bench {

/// `capacity` pinned blocks of `block_bytes` (one cudaHostAlloc, made up front: no allocation
/// while timed), of which the ring uses `initial` at first. Per upload: acquire() returns the
/// ring's next block once its last copy has run (one cudaEventQuery); when that copy has not run
/// yet, a block not used so far takes its place in the ring (as ferry's arena hands out reserved
/// blocks), and with none left the host waits for the copy (cudaEventSynchronize). The caller
/// writes the block, enqueues its copy, then calls release(stream): one cudaEventRecord.
class fenced_ring {
 public:
  fenced_ring(std::size_t block_bytes, std::size_t capacity, std::size_t initial = 2)
      : bytes_((block_bytes + 255) / 256 * 256), events_(capacity, nullptr), recorded_(capacity, false) {
    if (capacity < initial || initial == 0) throw std::invalid_argument("fenced_ring: capacity < initial");
    BENCH_CUDA(cudaHostAlloc(&base_, bytes_ * capacity, cudaHostAllocPortable));
    std::memset(base_, 0, bytes_ * capacity);
    for (auto& e : events_) BENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (std::size_t b = 0; b < initial; ++b) ring_.push_back(b);
    unused_ = initial;
  }
  fenced_ring(const fenced_ring&) = delete;
  fenced_ring& operator=(const fenced_ring&) = delete;
  ~fenced_ring() {
    for (auto e : events_) {
      cudaEventSynchronize(e);
      cudaEventDestroy(e);
    }
    cudaFreeHost(base_);
  }

  /// The block for the next upload, free to write.
  std::byte* acquire() {
    std::size_t b = ring_[pos_];
    if (recorded_[b]) {
      const cudaError_t q = cudaEventQuery(events_[b]);
      if (q == cudaErrorNotReady) {
        if (unused_ < events_.size()) {  // a fresh block goes in before the busy one
          ring_.insert(ring_.begin() + static_cast<std::ptrdiff_t>(pos_), unused_++);
          b = ring_[pos_];
        } else {
          BENCH_CUDA(cudaEventSynchronize(events_[b]));
        }
      } else {
        BENCH_CUDA(q);
      }
    }
    current_ = b;
    pos_ = (pos_ + 1) % ring_.size();
    return base_ + current_ * bytes_;
  }
  /// The fence of the block acquire() returned last, recorded on `s` after its copy.
  void release(cudaStream_t s) {
    BENCH_CUDA(cudaEventRecord(events_[current_], s));
    recorded_[current_] = true;
  }
  /// Blocks in the ring so far.
  [[nodiscard]] std::size_t size() const noexcept { return ring_.size(); }

 private:
  std::size_t bytes_;
  std::byte* base_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> recorded_;
  std::vector<std::size_t> ring_;  // block indices in the order the ring reuses them
  std::size_t pos_ = 0, current_ = 0, unused_ = 0;
};

}  // namespace ferry_bench
