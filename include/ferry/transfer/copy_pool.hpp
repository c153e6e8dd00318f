// ferry/transfer/copy_pool.hpp: copy_pool, the host threads that copy large pageable sources into
// pinned staging chunk by chunk (SPEC §5), its statistics, and default_copy_pool().
#pragma once

#include <ferry/detail/tuning.hpp>
#include <ferry/transfer/detail/copy_pool_core.hpp>
#include <ferry/transfer/detail/copy_tuning.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ferry {

// The copy pool's tuning: the values and their reasons are in detail/tuning.hpp, the
// measurements in docs/transfers.md, "Large pageable sources: the copy pool".

/// Pageable sources larger than this many bytes (4 MiB) are uploaded by async_h2d (under
/// pin::stage, when contiguous) through the chunked pipeline of a copy_pool rather than one
/// staging copy: below it, one memcpy into an arena block costs less than waking threads.
inline constexpr std::size_t large_copy_threshold = detail::large_copy_threshold;

/// The pipeline's chunk size (16 MiB) for a copy_pool constructed without one, and
/// default_copy_pool()'s should its measurement fail.
inline constexpr std::size_t default_copy_chunk_bytes = detail::default_copy_chunk_bytes;

/// The thread count (12) of a copy_pool constructed without one, and default_copy_pool()'s should
/// its measurement fail.
inline constexpr std::size_t default_copy_threads = detail::default_copy_threads;

/// The pipeline's unit of host copying (2 MiB): chunks are cut into slices of this many bytes (a
/// chunk smaller than this is one slice), and the pool's threads take slices from one queue that
/// runs across chunk boundaries.
inline constexpr std::size_t copy_slice_bytes = detail::copy_slice_bytes;

/// What a copy_pool has done. The pipeline's waits are host-blocking and counted here (and, as
/// event synchronizations, in backend_stats); the pipeline is excluded from zero-sync proofs.
struct pipeline_stats {
  std::uint64_t copies = 0;  ///< pipelined uploads
  std::uint64_t chunks = 0;  ///< chunks copied by the pool's threads
  std::uint64_t bytes = 0;   ///< bytes uploaded through the pipeline
  std::uint64_t waits = 0;   ///< waits for the stream (arena cap reached: oldest chunk's fence)
  std::uint64_t reused = 0;  ///< chunks staged in a block of the same copy that the stream had
                             ///< already passed (a small, cache-warm working set; 0 when the
                             ///< stream is busy and the whole source is staged)
};

/// A pool of host threads that copy large pageable sources into pinned staging for async_h2d's
/// pipeline (SPEC §5): the source is cut into chunk_bytes() chunks (one arena block each), every
/// chunk into copy_slice_bytes slices, and the threads take slices from one queue in order, so
/// they go on copying the next chunks while the caller enqueues a finished chunk's copy (there is
/// no barrier at chunk boundaries). Owned by the user, or the leaked default_copy_pool(). One
/// pipelined copy runs at a time on a pool (a second caller waits its turn); the pool's threads
/// only copy host memory, every CUDA call stays on the calling thread. Thread-safe.
class copy_pool {
 public:
  /// `threads` host threads; sources are cut into `chunk_bytes` chunks; async_h2d pipelines
  /// sources larger than `threshold_bytes`. Throws std::invalid_argument for 0 threads or a
  /// chunk size of 0.
  explicit copy_pool(std::size_t threads = default_copy_threads,
                     std::size_t chunk_bytes = default_copy_chunk_bytes,
                     std::size_t threshold_bytes = large_copy_threshold)
      : chunk_bytes_(chunk_bytes), threshold_bytes_(threshold_bytes) {
    if (threads == 0) throw std::invalid_argument("ferry: copy_pool needs at least one thread");
    if (chunk_bytes == 0) throw std::invalid_argument("ferry: copy_pool chunk size must not be 0");
    workers_.reserve(threads);
    try {
      for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { core_.serve(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  copy_pool(const copy_pool&) = delete;
  copy_pool& operator=(const copy_pool&) = delete;
  /// Joins the threads (no copy is running: a copy holds the pool until it returns).
  ~copy_pool() { stop(); }

  /// The number of host copy threads.
  [[nodiscard]] std::size_t threads() const noexcept { return workers_.size(); }
  /// The pipeline's chunk size in bytes (one arena block per chunk).
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  /// Contiguous pageable sources above this many bytes take the pipeline.
  [[nodiscard]] std::size_t threshold_bytes() const noexcept { return threshold_bytes_; }

  /// What this pool has done (see pipeline_stats).
  [[nodiscard]] pipeline_stats stats() const noexcept {
    constexpr auto r = std::memory_order_relaxed;
    return {core_.copies.load(r), core_.chunks.load(r), core_.bytes.load(r), core_.waits.load(r),
            core_.reused.load(r)};
  }

 private:
  friend class detail::pool_session;

  void stop() noexcept {
    core_.request_stop();
    for (auto& t : workers_)
      if (t.joinable()) t.join();
  }

  std::size_t chunk_bytes_;
  std::size_t threshold_bytes_;
  detail::pool_core core_;
  std::vector<std::thread> workers_;
};

/// The process-wide copy_pool: created on first use (thread-safe), never destroyed (intentionally
/// leaked at exit). Its threads and chunk size are chosen then from what this host measures
/// (docs/transfers.md, "Large pageable sources: the copy pool": the fewest threads that copy at
/// least 0.9x the fastest team's rate, chunks of what they copy in 250 µs; a few tens of ms, once
/// per process), unless the environment sets them: FERRY_COPY_THREADS (a thread count) and
/// FERRY_COPY_CHUNK_MIB (the chunk size in MiB); a malformed value → std::invalid_argument, and
/// the next call tries again. Should the measurement fail, default_copy_threads and
/// default_copy_chunk_bytes.
inline copy_pool& default_copy_pool() {
  static auto* pool = [] {
    const detail::copy_config c = detail::resolve_copy_config(
        std::getenv("FERRY_COPY_THREADS"), std::getenv("FERRY_COPY_CHUNK_MIB"),
        [] { return detail::measure_host_copy_rates(detail::available_cpus()); },
        detail::copy_config{default_copy_threads, default_copy_chunk_bytes});
    return new copy_pool(c.threads, c.chunk_bytes);
  }();
  return *pool;
}

}  // namespace ferry
