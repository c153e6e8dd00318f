// ferry/backend/detail/host_queue.hpp: the host backend's stream, an in-order work queue run by
// its own worker thread.
#pragma once

#include <ferry/error.hpp>

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

namespace ferry::detail {

/// An in-order queue of host tasks executed by one worker thread. Enqueue returns before the task
/// runs. Every task gets a sequence number (1, 2, ...); `completed()` is the number of tasks that
/// have finished, so "the stream has passed task s" is `completed() >= s`: a plain atomic load,
/// the host backend's equivalent of a host-visible completion counter.
///
/// A task that throws does not stop the queue: the first exception is kept and handed out once
/// by take_error(); later tasks still run.
class host_queue : public std::enable_shared_from_this<host_queue> {
 public:
  host_queue() : worker_([this] { run(); }) {}
  host_queue(const host_queue&) = delete;
  host_queue& operator=(const host_queue&) = delete;

  /// Drains the queue, then stops the worker.
  ~host_queue() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_one();
    worker_.join();
  }

  /// Appends a task; returns its sequence number.
  std::uint64_t enqueue(std::function<void()> task) {
    std::uint64_t seq;
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
      seq = ++enqueued_;
    }
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
    return completed_.load(std::memory_order_acquire);
  }

  /// Blocks until task `seq` has finished.
  void wait_for(std::uint64_t seq) {
    if (completed() >= seq) return;
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return completed_.load(std::memory_order_acquire) >= seq; });
  }

  /// Blocks until everything enqueued so far has finished.
  void drain() { wait_for(enqueued()); }

  /// The first error raised by a task since the last call, or null; clears it.
  std::exception_ptr take_error() {
    std::lock_guard lock(mutex_);
    return std::exchange(error_, nullptr);
  }

  [[nodiscard]] bool on_worker_thread() const noexcept {
    return std::this_thread::get_id() == worker_.get_id();
  }

 private:
  void run() {
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
      if (failure && !error_) error_ = failure;
      completed_.fetch_add(1, std::memory_order_release);
      done_cv_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> tasks_;
  std::uint64_t enqueued_ = 0;
  std::atomic<std::uint64_t> completed_{0};
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after every other member is constructed
};

}  // namespace ferry::detail
