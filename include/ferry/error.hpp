// ferry/error.hpp: the exception types of ferry and the checks that raise them.
#pragma once

#include <ferry/config.hpp>

#include <atomic>
#include <exception>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ferry {

/// Base of every exception ferry throws for a failed operation (bounds errors are
/// std::out_of_range and bad arguments std::invalid_argument).
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

}  // namespace detail

/// How many errors ferry destructors have swallowed in this process.
inline std::uint64_t swallowed_errors() noexcept {
  return detail::swallowed_error_count().load(std::memory_order_relaxed);
}

}  // namespace ferry
