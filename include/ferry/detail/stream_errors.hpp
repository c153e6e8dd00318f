// ferry/detail/stream_errors.hpp: what a stream keeps of the errors raised inside its work until a
// synchronizing call hands them out (both backends' streams).
#pragma once

#include <ferry/error.hpp>

#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <string>
#include <utility>

namespace ferry::detail {

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

/// Rethrows `e` when it holds an error (a kept stream error handed out by a synchronizing call).
inline void rethrow_if(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

}  // namespace ferry::detail
