// ferry/backend/wait_timeout.hpp: the bound on every wait ferry makes (docs/troubleshooting.md,
// "A wait past its bound").
#pragma once

#include <ferry/backend/detail/wait_bound.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

namespace ferry {

/// The bound of every wait ferry makes for a stream point (a full ring's back-pressure, an event's
/// synchronize, a blocking copy, a destructor or free that waits for its stream), unless the
/// component's ReusePolicy gives its own (`wait_timeout()`): set_wait_timeout's, else the
/// environment's FERRY_WAIT_TIMEOUT (seconds, e.g. `300` or `2.5`, read once), else 5 minutes.
/// A wait past it throws ferry::timeout_error naming what it waited for, with nothing changed; a
/// destructor past it returns, leaking (never freeing or reusing) what the stream may still read,
/// counted by ferry::swallowed_errors(). A FERRY_WAIT_TIMEOUT that is not a positive number of
/// seconds: std::invalid_argument from here and from the waits that read it, until the bound is
/// set (a destructor uses 5 minutes).
[[nodiscard]] inline std::chrono::nanoseconds wait_timeout() { return detail::process_wait_bound(); }

/// Sets the bound of every wait that its ReusePolicy does not bound (see wait_timeout()), for
/// the whole process, from any thread; a wait already blocked keeps the bound it started with.
/// `bound` not positive: std::invalid_argument, nothing changed.
inline void set_wait_timeout(std::chrono::nanoseconds bound) {
  if (bound.count() <= 0)
    throw std::invalid_argument("ferry: set_wait_timeout(" + std::to_string(bound.count()) +
                                " ns): the bound must be positive");
  detail::process_wait_bound_ns().store(bound.count(), std::memory_order_relaxed);
}

}  // namespace ferry
