// ferry/transfer/copy_pool.hpp: copy_pool, the host threads that copy large pageable sources into
// pinned staging chunk by chunk (SPEC §5), its statistics, and default_copy_pool().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ferry {

/// Pageable sources larger than this many bytes are uploaded by async_h2d (under pin::stage, when
/// contiguous) through the chunked pipeline of a copy_pool rather than one staging copy. Below it,
/// one memcpy into an arena block costs less than waking threads. 4 MiB: at 8.5 GB/s for one
/// thread (anchors/headroom-2026-11-30.txt) a 4 MiB memcpy takes about 0.5 ms, where a pool of
/// threads starts to pay for its hand-offs.
inline constexpr std::size_t large_copy_threshold = std::size_t{4} << 20;

/// The pipeline's chunk size by default: 16 MiB chunks with 8 threads measured 46.1 GB/s into
/// pinned staging on the H200 host, against 24.7 GB/s with 4 MiB chunks
/// (anchors/headroom-2026-11-30.txt).
inline constexpr std::size_t default_copy_chunk_bytes = std::size_t{16} << 20;

/// The pipeline's thread count by default (same measurement: 8 threads x 16 MiB).
inline constexpr std::size_t default_copy_threads = 8;

/// What a copy_pool has done. The pipeline's waits are host-blocking and counted here (and, as
/// event synchronizations, in backend_stats); the pipeline is excluded from zero-sync proofs.
struct pipeline_stats {
  std::uint64_t copies = 0;  ///< pipelined uploads
  std::uint64_t chunks = 0;  ///< chunks copied by the pool's threads
  std::uint64_t bytes = 0;   ///< bytes uploaded through the pipeline
  std::uint64_t waits = 0;   ///< waits for the stream (arena cap reached: oldest chunk's fence)
};

class copy_pool;

namespace detail {

/// One pipelined copy as the pool sees it: `work(i)` for every published index i.
class pool_job {
 public:
  virtual void work(std::size_t i) = 0;

 protected:
  pool_job() = default;
  pool_job(const pool_job&) = delete;
  pool_job& operator=(const pool_job&) = delete;
  ~pool_job() = default;

 private:
  friend class ferry::copy_pool;
  std::size_t published_ = 0;  // indices [0, published_) may start
  std::size_t next_ = 0;       // next index to start
  std::size_t finished_ = 0;   // how many have finished
  std::vector<unsigned char> done_;
  std::exception_ptr error_;
};

}  // namespace detail

/// A pool of host threads that copy chunks of large pageable sources into pinned staging for
/// async_h2d's pipeline (SPEC §5). Owned by the user, or the leaked default_copy_pool(). One
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
      for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  copy_pool(const copy_pool&) = delete;
  copy_pool& operator=(const copy_pool&) = delete;
  /// Joins the threads (no copy is running: a copy holds the pool until it returns).
  ~copy_pool() { stop(); }

  [[nodiscard]] std::size_t threads() const noexcept { return workers_.size(); }
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  [[nodiscard]] std::size_t threshold_bytes() const noexcept { return threshold_bytes_; }

  [[nodiscard]] pipeline_stats stats() const noexcept {
    constexpr auto r = std::memory_order_relaxed;
    return {copies_.load(r), chunks_.load(r), bytes_.load(r), waits_.load(r)};
  }

  // ---- used by the pipeline (detail) -------------------------------------------------------

  /// Holds the pool for one job of `count` chunks from construction to destruction; the
  /// destructor waits until every published chunk has finished.
  class session {
   public:
    session(copy_pool& pool, detail::pool_job& job, std::size_t count)
        : pool_(pool), job_(job), lock_(pool.run_mutex_) {
      job.done_.assign(count, 0);
      std::lock_guard l(pool_.mutex_);
      pool_.job_ = &job_;
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;
    ~session() {
      std::unique_lock l(pool_.mutex_);
      pool_.done_cv_.wait(l, [&] { return job_.finished_ == job_.published_; });
      pool_.job_ = nullptr;
    }
    /// Lets chunks [0, n) start.
    void publish(std::size_t n) {
      {
        std::lock_guard l(pool_.mutex_);
        job_.published_ = n;
      }
      pool_.work_cv_.notify_all();
    }
    /// Blocks until chunk i (published) has finished; rethrows the first error of any chunk.
    void wait(std::size_t i) {
      std::unique_lock l(pool_.mutex_);
      pool_.done_cv_.wait(l, [&] { return job_.done_[i] != 0; });
      if (job_.error_) std::rethrow_exception(job_.error_);
    }
    void count_wait() noexcept { pool_.waits_.fetch_add(1, std::memory_order_relaxed); }
    void count_copy(std::size_t chunks, std::size_t bytes) noexcept {
      pool_.copies_.fetch_add(1, std::memory_order_relaxed);
      pool_.chunks_.fetch_add(chunks, std::memory_order_relaxed);
      pool_.bytes_.fetch_add(bytes, std::memory_order_relaxed);
    }

   private:
    copy_pool& pool_;
    detail::pool_job& job_;
    std::unique_lock<std::mutex> lock_;
  };

 private:
  void run() {
    std::unique_lock l(mutex_);
    for (;;) {
      work_cv_.wait(l, [&] { return stop_ || (job_ && job_->next_ < job_->published_); });
      if (!job_ || job_->next_ >= job_->published_) return;  // stopping, nothing to do
      detail::pool_job* job = job_;
      const std::size_t i = job->next_++;
      l.unlock();
      std::exception_ptr failure;
      try {
        job->work(i);
      } catch (...) {
        failure = std::current_exception();
      }
      l.lock();
      if (failure && !job->error_) job->error_ = failure;
      job->done_[i] = 1;
      ++job->finished_;
      done_cv_.notify_all();
    }
  }

  void stop() noexcept {
    {
      std::lock_guard l(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_)
      if (t.joinable()) t.join();
  }

  std::size_t chunk_bytes_;
  std::size_t threshold_bytes_;
  std::mutex run_mutex_;  // one job at a time
  std::mutex mutex_;      // job state
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  detail::pool_job* job_ = nullptr;
  bool stop_ = false;
  std::atomic<std::uint64_t> copies_{0}, chunks_{0}, bytes_{0}, waits_{0};
  std::vector<std::thread> workers_;
};

/// The process-wide copy_pool (default_copy_threads threads, default_copy_chunk_bytes chunks):
/// created on first use (thread-safe), never destroyed (intentionally leaked at exit).
inline copy_pool& default_copy_pool() {
  static auto* pool = new copy_pool();
  return *pool;
}

}  // namespace ferry
