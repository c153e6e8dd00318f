// ferry/error.hpp: the exception types of ferry and the checks that raise them.
#pragma once

#include <ferry/config.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
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

/// A wait of ferry's (a full ring's back-pressure, an event's synchronize, a destructor or free
/// that waits for its stream) ran past its bound (ferry::wait_timeout): the message names what it
/// waited for (the slot, the stream point) and for how long; nothing was changed.
class timeout_error : public error {
 public:
  using error::error;
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

/// Counts one error a destructor could not report (a wait past its bound that leaks what the
/// stream may still read, or an exception destructor_guard caught).
inline void count_swallowed_error() noexcept {
  swallowed_error_count().fetch_add(1, std::memory_order_relaxed);
}

/// Runs `f`; an exception is counted and swallowed. Returns whether `f` returned normally.
template <class F>
bool destructor_guard(F&& f) noexcept {
  try {
    f();
    return true;
  } catch (...) {
    count_swallowed_error();
    return false;
  }
}

}  // namespace detail

/// How many errors ferry destructors have swallowed in this process.
inline std::uint64_t swallowed_errors() noexcept {
  return detail::swallowed_error_count().load(std::memory_order_relaxed);
}

}  // namespace ferry
