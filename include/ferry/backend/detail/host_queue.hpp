// ferry/backend/detail/host_queue.hpp: the host backend's stream, an in-order work queue run by
// its own worker thread.
#pragma once

#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/detail/stream_errors.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::detail {

/// An in-order queue of host tasks executed by one worker thread. Enqueue returns before the task
/// runs. Every task gets a sequence number (1, 2, ...); `completed()` is the number of tasks that
/// have finished, so "the stream has passed task s" is `completed() >= s`: a plain atomic load,
/// the host backend's equivalent of a host-visible completion counter.
///
/// A task that throws does not stop the queue: its exception is kept with the task's sequence
/// number and handed out by take_error(); later tasks still run.
///
/// close() (the owning stream's destruction) drains the queue and ends its worker; the closed
/// queue lives on, with no thread, as long as events recorded on it do.
class host_queue : public std::enable_shared_from_this<host_queue> {
 public:
  host_queue() : worker_([this] { run(); }) {}
  /// A new queue, listed for drain_all() once make_shared has built it (listing itself in its
  /// constructor would let other threads see it half made).
  static std::shared_ptr<host_queue> create() {
    auto q = std::make_shared<host_queue>();
    registry().add(q);
    return q;
  }
  host_queue(const host_queue&) = delete;
  host_queue& operator=(const host_queue&) = delete;
  ~host_queue() { close(); }

  /// Drains the queue and ends its worker (idempotent); later enqueues throw. Errors that no
  /// synchronizing call took are dropped and counted in swallowed_errors().
  void close() noexcept {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    work_cv_.notify_one();
    worker_.join();
    registry().remove(this);
    std::lock_guard lock(mutex_);
    errors_.drop();
  }

  /// Blocks until everything enqueued so far on every live queue has finished (the host
  /// backend's cudaDeviceSynchronize, and the implicit wait of its frees, as cudaFree's), or `d`
  /// expires (then false). Called from a task, it skips the queue running that task (which cannot
  /// wait for itself).
  [[nodiscard]] static bool drain_all(wait_deadline& d) {
    for (;;) {
      // Snapshot, then drain outside the registry lock: a queue's tasks may create or destroy
      // queues. A queue destroyed meanwhile has drained itself (its destructor does).
      std::vector<std::shared_ptr<host_queue>> live = registry().snapshot();
      bool waited = false;
      for (auto& q : live) {
        if (q.get() == running_queue()) continue;
        const std::uint64_t upto = q->enqueued();
        if (q->completed() < upto) {
          if (!q->wait_until(upto, d.until())) return false;
          waited = true;
        }
      }
      if (!waited) return true;  // one more pass: work may have been enqueued on a drained queue
    }
  }

  /// Appends a task; returns its sequence number. Every task of every host stream comes through
  /// here, so this is where the host backend counts enqueues (backend_stats::enqueues).
  std::uint64_t enqueue(std::function<void()> task) {
    std::uint64_t seq;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) throw error("ferry: the stream was destroyed");
      tasks_.push_back(std::move(task));
      seq = ++enqueued_;
    }
    count(counters<backend::host>().enqueues);
    work_cv_.notify_one();
    return seq;
  }

  /// The sequence number of the last task enqueued so far (0 when none).
  [[nodiscard]] std::uint64_t enqueued() const {
    std::lock_guard lock(mutex_);
    return enqueued_;
  }

  /// How many tasks have finished; every task with a sequence number at or below it is done.
  [[nodiscard]] std::uint64_t completed() const noexcept {
    return completed_->load(std::memory_order_acquire);
  }
  /// The counter behind completed(), shared: it outlives the queue, and a queue goes only once
  /// drained, so its last value passes every task the queue ever had.
  [[nodiscard]] std::shared_ptr<const std::atomic<std::uint64_t>> completion() const noexcept {
    return completed_;
  }

  /// Blocks until task `seq` has finished.
  void wait_for(std::uint64_t seq) {
    if (completed() >= seq) return;
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return completed_->load(std::memory_order_acquire) >= seq; });
  }

  /// Blocks until task `seq` has finished (then true) or `until` (then false).
  [[nodiscard]] bool wait_until(std::uint64_t seq, wait_clock::time_point until) {
    if (completed() >= seq) return true;
    std::unique_lock lock(mutex_);
    return done_cv_.wait_until(lock, until, [&] { return completed_->load(std::memory_order_acquire) >= seq; });
  }

  /// Blocks until everything enqueued so far has finished.
  void drain() { wait_for(enqueued()); }

  /// The first error raised by a task at or before sequence number `upto` (null if none);
  /// consumes every error up to there.
  std::exception_ptr take_error(std::uint64_t upto = stream_errors::all) {
    std::lock_guard lock(mutex_);
    return errors_.take(upto);
  }

  /// The queue whose task the calling thread is running (null outside a worker).
  static host_queue*& running_queue() noexcept {
    thread_local host_queue* q = nullptr;
    return q;
  }

 private:
  // Every live queue, for drain_all(). Leaked: queues may outlive static destruction.
  class queue_registry {
   public:
    void add(const std::shared_ptr<host_queue>& q) {
      std::lock_guard lock(mutex_);
      queues_.push_back({q.get(), q});
    }
    // Drops `q` and every queue already gone. Never locks a weak_ptr here: the last owner of a
    // queue released under this mutex would destroy it, and the destructor comes back here.
    void remove(const host_queue* q) {
      std::lock_guard lock(mutex_);
      std::erase_if(queues_, [q](const entry& e) { return e.queue == q || e.owner.expired(); });
    }
    // The live queues (owned by the caller, so none is destroyed under this mutex).
    std::vector<std::shared_ptr<host_queue>> snapshot() {
      std::lock_guard lock(mutex_);
      std::vector<std::shared_ptr<host_queue>> out;
      out.reserve(queues_.size());
      for (const auto& e : queues_)
        if (auto p = e.owner.lock()) out.push_back(std::move(p));
      return out;
    }

   private:
    struct entry {
      const host_queue* queue;
      std::weak_ptr<host_queue> owner;
    };
    std::mutex mutex_;
    std::vector<entry> queues_;
  };
  static queue_registry& registry() {
    static auto* r = new queue_registry;
    return *r;
  }

  void run() {
    running_queue() = this;
    std::unique_lock lock(mutex_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and drained
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      std::exception_ptr failure;
      try {
        task();
      } catch (...) {
        failure = capture_stream_error();
      }
      task = nullptr;  // destroy captures on the worker, before the task counts as done
      lock.lock();
      const std::uint64_t seq = completed_->load(std::memory_order_relaxed) + 1;
      if (failure) errors_.add(seq, std::move(failure));
      completed_->store(seq, std::memory_order_release);
      done_cv_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> tasks_;
  std::uint64_t enqueued_ = 0;
  std::shared_ptr<std::atomic<std::uint64_t>> completed_ = std::make_shared<std::atomic<std::uint64_t>>(0);
  stream_errors errors_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after every other member is constructed
};

}  // namespace ferry::detail
