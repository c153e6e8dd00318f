// ferry/error.hpp: the exception types of ferry and the checks that raise them.
#pragma once

#include <ferry/config.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace ferry {

/// Base of every exception ferry throws for a failed operation (bounds errors are
/// std::out_of_range, bad arguments std::invalid_argument, and running out of memory
/// ferry::out_of_memory, a std::bad_alloc).
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CUDA runtime or driver call failed; carries the error code.
class cuda_error : public error {
 public:
  /// An error with the cudaError_t `code` and the message `what`.
  cuda_error(int code, const std::string& what) : error(what), code_(code) {}
  /// The cudaError_t value, as an int (so that this header needs no CUDA header).
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// A fixed or capped capacity (pinned arena cap, growth::fixed, max_slots) would be exceeded.
class capacity_error : public error {
 public:
  using error::error;
};

/// Pinned or device memory ran out, on either backend (CUDA: cudaErrorMemoryAllocation from
/// cudaHostAlloc, cudaMalloc or cudaMallocAsync, consumed; host: the allocator failed). A
/// std::bad_alloc, not a ferry::error, so that generic out-of-memory handlers catch it; what()
/// starts with "ferry: " and names the request.
class out_of_memory : public std::bad_alloc {
 public:
  /// An error whose what() is `what`.
  explicit out_of_memory(const std::string& what) : what_(what) {}
  /// The message, starting with "ferry: ".
  [[nodiscard]] const char* what() const noexcept override { return what_.what(); }

 private:
  std::runtime_error what_;  // holds the message; its copies never throw, as an exception's must not
};

/// A synchronizing call or an allocation was made inside a ferry::sync_guard in raise mode.
class sync_error : public error {
 public:
  using error::error;
};

namespace detail {

// Errors swallowed by destructors (which never throw), counted so that tests and users can see
// them: ferry::swallowed_errors().
inline std::atomic<std::uint64_t>& swallowed_error_count() noexcept {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

template <class F>
void destructor_guard(F&& f) noexcept {
  try {
    f();
  } catch (...) {
    swallowed_error_count().fetch_add(1, std::memory_order_relaxed);
  }
}

// The exception to keep for an error raised inside stream work: ferry errors as they are, anything
// else wrapped in ferry::error (naming the original message), so that the next synchronizing call
// always throws a ferry::error.
inline std::exception_ptr capture_stream_error() noexcept {
  try {
    throw;
  } catch (const error&) {
    return std::current_exception();
  } catch (const std::exception& e) {
    return std::make_exception_ptr(error(std::string("ferry: work enqueued on the stream threw: ") + e.what()));
  } catch (...) {
    return std::make_exception_ptr(error("ferry: work enqueued on the stream threw a non-standard exception"));
  }
}

/// The errors raised inside one stream's work, each with the position (sequence number) of the
/// work that raised it, kept until a synchronizing call ordered after it hands it out. Not
/// thread-safe: its owner locks.
class stream_errors {
 public:
  static constexpr std::uint64_t all = std::numeric_limits<std::uint64_t>::max();

  void add(std::uint64_t seq, std::exception_ptr e) { errors_.push_back({seq, std::move(e)}); }
  /// The first error at or before `upto` (null if none); every error at or before `upto` is
  /// consumed with it, so that one synchronizing call throws one error, once.
  [[nodiscard]] std::exception_ptr take(std::uint64_t upto) {
    std::exception_ptr first;
    if (!errors_.empty() && errors_.front().seq <= upto) first = std::move(errors_.front().error);
    while (!errors_.empty() && errors_.front().seq <= upto) errors_.pop_front();
    return first;
  }
  [[nodiscard]] bool empty() const noexcept { return errors_.empty(); }
  /// Drops every error, counting the one the next synchronizing call would have thrown as
  /// swallowed: for a stream destroyed before anything took them.
  void drop() noexcept {
    if (errors_.empty()) return;
    errors_.clear();
    swallowed_error_count().fetch_add(1, std::memory_order_relaxed);
  }

 private:
  struct entry {
    std::uint64_t seq;
    std::exception_ptr error;
  };
  std::deque<entry> errors_;
};

}  // namespace detail

/// How many errors ferry destructors have swallowed in this process.
inline std::uint64_t swallowed_errors() noexcept {
  return detail::swallowed_error_count().load(std::memory_order_relaxed);
}

}  // namespace ferry
