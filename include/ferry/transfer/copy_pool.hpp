// ferry/transfer/copy_pool.hpp: copy_pool, the host threads that copy large pageable sources into
// pinned staging chunk by chunk (SPEC §5), its statistics, and default_copy_pool().
#pragma once

#include <algorithm>
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
/// contiguous) through the chunked pipeline of a copy_pool rather than one staging copy: below it,
/// one memcpy into an arena block costs less than waking threads (measured in
/// docs/transfers.md, "Large pageable sources: the copy pool").
inline constexpr std::size_t large_copy_threshold = std::size_t{4} << 20;

/// The pipeline's chunk size by default: with default_copy_threads, the structure measured
/// fastest into pinned staging (docs/transfers.md, "Large pageable sources: the copy pool";
/// bench.h2d sweeps the alternatives beside it).
inline constexpr std::size_t default_copy_chunk_bytes = std::size_t{16} << 20;

/// The pipeline's thread count by default (the same measurement: with 16 MiB chunks, 12 threads
/// were as fast as 8 on hosts that copy fast, and up to a quarter faster on hosts that copy slowly).
inline constexpr std::size_t default_copy_threads = 12;

/// The pipeline's unit of host copying: chunks are cut into slices of this many bytes (a chunk
/// smaller than this is one slice), and the pool's threads take slices from one queue that runs
/// across chunk boundaries. 2 MiB: a default chunk is 8 slices, so the default threads work on
/// two chunks at once.
inline constexpr std::size_t copy_slice_bytes = std::size_t{2} << 20;

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

class copy_pool;

namespace detail {

class pool_session;

/// One pipelined copy as the pool sees it: `work(i)` for every published index i. Indices start
/// in increasing order, across everything published so far.
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
  friend class pool_session;
  std::size_t published_ = 0;  // indices [0, published_) may start
  std::size_t next_ = 0;       // next index to start
  std::size_t finished_ = 0;   // how many have finished
  std::vector<unsigned char> done_;
  std::exception_ptr error_;
};

}  // namespace detail

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

  /// The number of host copy threads.
  [[nodiscard]] std::size_t threads() const noexcept { return workers_.size(); }
  /// The pipeline's chunk size in bytes (one arena block per chunk).
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  /// Contiguous pageable sources above this many bytes take the pipeline.
  [[nodiscard]] std::size_t threshold_bytes() const noexcept { return threshold_bytes_; }

  /// What this pool has done (see pipeline_stats).
  [[nodiscard]] pipeline_stats stats() const noexcept {
    constexpr auto r = std::memory_order_relaxed;
    return {copies_.load(r), chunks_.load(r), bytes_.load(r), waits_.load(r), reused_.load(r)};
  }

 private:
  friend class detail::pool_session;

  // Starts the next item of `job` (l holds mutex_, and next_ < published_), runs it unlocked,
  // marks it done; returns with l held again.
  void run_one(std::unique_lock<std::mutex>& l, detail::pool_job& job) {
    const std::size_t i = job.next_++;
    l.unlock();
    std::exception_ptr failure;
    try {
      job.work(i);
    } catch (...) {
      failure = std::current_exception();
    }
    l.lock();
    if (failure && !job.error_) job.error_ = failure;
    job.done_[i] = 1;
    ++job.finished_;
    done_cv_.notify_all();
  }

  void run() {
    std::unique_lock l(mutex_);
    for (;;) {
      work_cv_.wait(l, [&] { return stop_ || (job_ && job_->next_ < job_->published_); });
      if (!job_ || job_->next_ >= job_->published_) return;  // stopping, nothing to do
      run_one(l, *job_);
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
  std::atomic<std::uint64_t> copies_{0}, chunks_{0}, bytes_{0}, waits_{0}, reused_{0};
  std::vector<std::thread> workers_;
};

namespace detail {

/// Holds a copy_pool for one job of `count` work items from construction to destruction; the
/// destructor waits until every published item has finished. async_h2d's pipeline drives it.
class pool_session {
 public:
  /// Takes `pool` (waiting for a running job to end) for `job`, of `count` work items.
  pool_session(copy_pool& pool, pool_job& job, std::size_t count)
      : pool_(pool), job_(job), lock_(pool.run_mutex_) {
    job.done_.assign(count, 0);
    std::lock_guard l(pool_.mutex_);
    pool_.job_ = &job_;
  }
  pool_session(const pool_session&) = delete;
  pool_session& operator=(const pool_session&) = delete;
  ~pool_session() {
    std::unique_lock l(pool_.mutex_);
    pool_.done_cv_.wait(l, [&] { return job_.finished_ == job_.published_; });
    pool_.job_ = nullptr;
  }
  /// Lets items [0, n) start (n never decreases).
  void publish(std::size_t n) {
    {
      std::lock_guard l(pool_.mutex_);
      job_.published_ = n;
    }
    pool_.work_cv_.notify_all();
  }
  /// Runs one published item below `end` that no thread has started, on the calling thread;
  /// false when there is none.
  bool help(std::size_t end) {
    std::unique_lock l(pool_.mutex_);
    if (job_.next_ >= std::min(end, job_.published_)) return false;
    pool_.run_one(l, job_);
    return true;
  }
  /// Blocks until items [b, e) (published) have finished, running unstarted ones of them on the
  /// calling thread meanwhile; rethrows the first error of any item.
  void wait(std::size_t b, std::size_t e) {
    while (help(e)) {
    }
    std::unique_lock l(pool_.mutex_);
    pool_.done_cv_.wait(l, [&] {
      for (std::size_t i = b; i < e; ++i)
        if (job_.done_[i] == 0) return false;
      return true;
    });
    if (job_.error_) std::rethrow_exception(job_.error_);
  }
  /// Counts one wait for the stream in the pool's stats.
  void count_wait() noexcept { pool_.waits_.fetch_add(1, std::memory_order_relaxed); }
  /// Counts one finished pipelined copy of `chunks` chunks (`reused` of them in blocks used
  /// earlier in the same copy) and `bytes` bytes.
  void count_copy(std::size_t chunks, std::size_t reused, std::size_t bytes) noexcept {
    pool_.copies_.fetch_add(1, std::memory_order_relaxed);
    pool_.chunks_.fetch_add(chunks, std::memory_order_relaxed);
    pool_.reused_.fetch_add(reused, std::memory_order_relaxed);
    pool_.bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  copy_pool& pool_;
  pool_job& job_;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace detail

/// The process-wide copy_pool (default_copy_threads threads, default_copy_chunk_bytes chunks):
/// created on first use (thread-safe), never destroyed (intentionally leaked at exit).
inline copy_pool& default_copy_pool() {
  static auto* pool = new copy_pool();
  return *pool;
}

}  // namespace ferry
