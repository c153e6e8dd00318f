// ferry/backend/detail/wait_bound.hpp: the bound every wait of ferry's takes (the process-wide
// setting, a wait's deadline) and how a bounded wait polls (docs/troubleshooting.md, "A wait past
// its bound").
#pragma once

#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace ferry::detail {

using wait_clock = std::chrono::steady_clock;

/// The process-wide bound in nanoseconds: 0 until set or first read.
inline std::atomic<std::int64_t>& process_wait_bound_ns() noexcept {
  static std::atomic<std::int64_t> ns{0};
  return ns;
}

/// The bound FERRY_WAIT_TIMEOUT names (`text`: seconds, e.g. "300" or "2.5"; null: the default).
/// Anything but a number of seconds in (0, 10^9] is std::invalid_argument.
inline std::chrono::nanoseconds wait_bound_from_env(const char* text) {
  if (text == nullptr) return default_wait_timeout;
  char* end = nullptr;
  const double s = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(s) || s <= 0 || s > 1e9)
    throw std::invalid_argument(std::string("ferry: FERRY_WAIT_TIMEOUT=\"") + text +
                                "\" is not a number of seconds in (0, 1e9] (e.g. 300 or 2.5)");
  return std::chrono::nanoseconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(s * 1e9))));
}

/// ferry::wait_timeout(): set_wait_timeout's bound, else FERRY_WAIT_TIMEOUT's (read once), else
/// the default. A bad FERRY_WAIT_TIMEOUT throws std::invalid_argument at every read until the
/// bound is set.
inline std::chrono::nanoseconds process_wait_bound() {
  auto& ns = process_wait_bound_ns();
  if (const std::int64_t n = ns.load(std::memory_order_relaxed); n > 0) return std::chrono::nanoseconds(n);
  std::int64_t unset = 0;
  ns.compare_exchange_strong(unset, wait_bound_from_env(std::getenv("FERRY_WAIT_TIMEOUT")).count(),
                             std::memory_order_relaxed);  // a set_wait_timeout in between wins
  return std::chrono::nanoseconds(ns.load(std::memory_order_relaxed));
}

/// The deadline of one wait (or of several made as one: a destructor's, a ring slot's stamps): its
/// bound, and the time it started, taken when a wait first blocks (a wait that does not block
/// reads no clock).
class wait_deadline {
 public:
  /// The process-wide bound (ferry::wait_timeout), read when a wait first blocks.
  wait_deadline() noexcept = default;
  /// `bound`; 0 or less: the process-wide bound.
  explicit wait_deadline(std::chrono::nanoseconds bound) noexcept : bound_(bound) {}

  /// The time past which a wait gives up; the first call starts the clock (and reads the
  /// process-wide bound, which may throw std::invalid_argument: then nothing has waited yet).
  wait_clock::time_point until() {
    if (!started_) {
      if (bound_.count() <= 0) bound_ = process_wait_bound();
      start_ = wait_clock::now();
      const auto room = wait_clock::time_point::max() - start_;
      until_ = bound_ >= room ? wait_clock::time_point::max()
                              : start_ + std::chrono::duration_cast<wait_clock::duration>(bound_);
      started_ = true;
    }
    return until_;
  }
  /// The bound (0 before the clock started, when it is the process-wide one).
  [[nodiscard]] std::chrono::nanoseconds bound() const noexcept { return bound_; }
  /// How long the waits under this deadline have taken so far.
  [[nodiscard]] std::chrono::nanoseconds waited() const noexcept {
    return started_ ? std::chrono::duration_cast<std::chrono::nanoseconds>(wait_clock::now() - start_)
                    : std::chrono::nanoseconds(0);
  }

 private:
  std::chrono::nanoseconds bound_{0};
  wait_clock::time_point start_{}, until_{};
  bool started_ = false;
};

/// The deadline of a destructor's waits, which cannot report a bad bound: `bound()` (0: the
/// process-wide one), else (it throws) the default.
template <class Bound>
wait_deadline destructor_deadline(Bound&& bound) noexcept {
  try {
    const std::chrono::nanoseconds b = bound();
    return wait_deadline(b.count() > 0 ? b : process_wait_bound());
  } catch (...) {
    return wait_deadline(default_wait_timeout);
  }
}
inline wait_deadline destructor_deadline() noexcept {
  return destructor_deadline([] { return std::chrono::nanoseconds(0); });
}

/// Calls `ready()` until it returns true (then true) or `d` expires (then false, after a last
/// call): back to back, yielding, for the first wait_spin (a quick wait costs one more query than
/// a blocking one), then sleeping between calls, each sleep twice the last up to wait_sleep_max
/// (a long wait costs a few calls a millisecond, and wakes at most that late).
template <class Ready>
bool poll_until(wait_deadline& d, Ready&& ready) {
  if (ready()) return true;
  const auto until = d.until();
  const auto spin_until = wait_clock::now() + wait_spin;
  std::chrono::nanoseconds sleep = wait_sleep_min;
  for (;;) {
    const auto now = wait_clock::now();
    if (now >= until) return ready();
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min<wait_clock::duration>(sleep, until - now));
      sleep = std::min<std::chrono::nanoseconds>(2 * sleep, wait_sleep_max);
    }
    if (ready()) return true;
  }
}

/// A duration for a message: "250 ms", "1.5 s".
inline std::string duration_text(std::chrono::nanoseconds d) {
  char buf[48];
  const double ms = static_cast<double>(d.count()) / 1e6;
  if (ms < 1000)
    std::snprintf(buf, sizeof buf, "%.4g ms", ms);
  else
    std::snprintf(buf, sizeof buf, "%.4g s", ms / 1000);
  return buf;
}

/// The end of every message of a wait past its bound: how long it waited, the bound, what may be
/// the cause and where the bound is set.
inline std::string timeout_text(const wait_deadline& d) {
  return "waited " + duration_text(d.waited()) + ", past the wait bound of " + duration_text(d.bound()) +
         " (the stream does not advance: a hung kernel, a host task or a reader that never finishes, a "
         "stalled GPU?; the bound: ferry::set_wait_timeout, FERRY_WAIT_TIMEOUT, or the ReusePolicy's "
         "wait_timeout())";
}

}  // namespace ferry::detail
