// ferry/sync/detail/sync_verdict.hpp: the rule both sync scopes (sync_guard, host_sync_guard) share
// for when a scope in raise mode throws.
#pragma once

#include <ferry/error.hpp>
#include <ferry/sync/sync_mode.hpp>

#include <cstdint>
#include <exception>

namespace ferry::detail {

// The raise-mode bookkeeping both sync scopes share: which calls a check() has already reported,
// and how many exceptions were in flight when the scope began (so that the destructor never
// throws while the stack unwinds).
class sync_verdict {
 public:
  explicit sync_verdict(sync_mode m) noexcept : mode_(m), uncaught_(std::uncaught_exceptions()) {}

  [[nodiscard]] sync_mode mode() const noexcept { return mode_; }

  // check(): in raise mode, throws when calls were seen that no earlier check() reported.
  // `seen` is the scope's total (syncs + allocations); `report` builds the message lazily.
  template <class Report>
  void check(std::uint64_t seen, Report&& report) {
    if (mode_ != sync_mode::raise || seen == reported_) return;
    reported_ = seen;
    throw sync_error(report());
  }

  // The destructor path: the same as check(), but only when no exception began unwinding since
  // the scope was made (throwing then would call std::terminate).
  template <class Report>
  void check_at_exit(std::uint64_t seen, Report&& report) {
    if (std::uncaught_exceptions() > uncaught_) return;
    check(seen, static_cast<Report&&>(report));
  }

 private:
  sync_mode mode_;
  int uncaught_;
  std::uint64_t reported_ = 0;
};

}  // namespace ferry::detail
