// ferry/transfer/detail/copy_pool_core.hpp: the machinery under ferry::copy_pool: the job protocol
// its threads run (pool_job: numbered work items published in order; pool_core: the threads' queue;
// pool_session: one job holding a pool from start to end), which async_h2d's large pageable
// pipeline (pipeline.hpp) drives.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

namespace ferry::detail {

class pool_core;
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
  friend class pool_core;
  friend class pool_session;
  std::size_t published_ = 0;  // indices [0, published_) may start
  std::size_t next_ = 0;       // next index to start
  std::size_t finished_ = 0;   // how many have finished
  std::vector<unsigned char> done_;
  std::exception_ptr error_;
};

/// The queue a copy_pool's threads serve: at most one job at a time (run_mutex), its items taken
/// in order by whichever thread is free; and the pool's counters.
class pool_core {
 public:
  pool_core() = default;
  pool_core(const pool_core&) = delete;
  pool_core& operator=(const pool_core&) = delete;

  /// A pool thread's life: runs published items until request_stop().
  void serve() {
    std::unique_lock l(mutex_);
    for (;;) {
      work_cv_.wait(l, [&] { return stop_ || (job_ && job_->next_ < job_->published_); });
      if (!job_ || job_->next_ >= job_->published_) return;  // stopping, nothing to do
      run_one(l, *job_);
    }
  }

  /// Makes every serve() return once no item is left to start (no job runs: a job holds its
  /// pool until it ends).
  void request_stop() noexcept {
    {
      std::lock_guard l(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
  }

  std::atomic<std::uint64_t> copies{0}, chunks{0}, bytes{0}, waits{0}, reused{0};

 private:
  friend class pool_session;

  // Starts the next item of `job` (l holds mutex_, and next_ < published_), runs it unlocked,
  // marks it done; returns with l held again.
  void run_one(std::unique_lock<std::mutex>& l, pool_job& job) {
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

  std::mutex run_mutex_;  // one job at a time
  std::mutex mutex_;      // job state
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  pool_job* job_ = nullptr;
  bool stop_ = false;
};

/// Holds a copy_pool for one job of `count` work items from construction to destruction; the
/// destructor waits until every published item has finished. async_h2d's pipeline drives it.
class pool_session {
 public:
  /// Takes `pool` (a copy_pool; waiting for a running job to end) for `job`, of `count` work items.
  template <class Pool>
  pool_session(Pool& pool, pool_job& job, std::size_t count)
      : core_(pool.core_), job_(job), lock_(core_.run_mutex_) {
    job.done_.assign(count, 0);
    std::lock_guard l(core_.mutex_);
    core_.job_ = &job_;
  }
  pool_session(const pool_session&) = delete;
  pool_session& operator=(const pool_session&) = delete;
  ~pool_session() {
    std::unique_lock l(core_.mutex_);
    core_.done_cv_.wait(l, [&] { return job_.finished_ == job_.published_; });
    core_.job_ = nullptr;
  }
  /// Lets items [0, n) start (n never decreases).
  void publish(std::size_t n) {
    {
      std::lock_guard l(core_.mutex_);
      job_.published_ = n;
    }
    core_.work_cv_.notify_all();
  }
  /// Runs one published item below `end` that no thread has started, on the calling thread;
  /// false when there is none.
  bool help(std::size_t end) {
    std::unique_lock l(core_.mutex_);
    if (job_.next_ >= std::min(end, job_.published_)) return false;
    core_.run_one(l, job_);
    return true;
  }
  /// Blocks until items [b, e) (published) have finished, running unstarted ones of them on the
  /// calling thread meanwhile; rethrows the first error of any item.
  void wait(std::size_t b, std::size_t e) {
    while (help(e)) {
    }
    std::unique_lock l(core_.mutex_);
    core_.done_cv_.wait(l, [&] {
      for (std::size_t i = b; i < e; ++i)
        if (job_.done_[i] == 0) return false;
      return true;
    });
    if (job_.error_) std::rethrow_exception(job_.error_);
  }
  /// Counts one wait for the stream in the pool's stats.
  void count_wait() noexcept { core_.waits.fetch_add(1, std::memory_order_relaxed); }
  /// Counts one finished pipelined copy of `chunks` chunks (`reused` of them in blocks used
  /// earlier in the same copy) and `bytes` bytes.
  void count_copy(std::size_t chunks, std::size_t reused, std::size_t bytes) noexcept {
    core_.copies.fetch_add(1, std::memory_order_relaxed);
    core_.chunks.fetch_add(chunks, std::memory_order_relaxed);
    core_.reused.fetch_add(reused, std::memory_order_relaxed);
    core_.bytes.fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  pool_core& core_;
  pool_job& job_;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace ferry::detail
