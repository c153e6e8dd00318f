// ferry/sync/detail/sync_verdict.hpp: the rule both sync scopes (sync_guard, host_sync_guard) share
// for when a scope in raise mode throws.
#pragma once

#include <ferry/error.hpp>
#include <ferry/sync/sync_mode.hpp>

#include <cstdint>
#include <exception>
#include <string>

namespace ferry::detail {

// The raise-mode bookkeeping both sync scopes share: which calls a check() has already reported,
// and how many exceptions were in flight when the scope began (so that the destructor never
// throws while the stack unwinds).
class sync_verdict {
 public:
  explicit sync_verdict(sync_mode m) noexcept : mode_(m), uncaught_(std::uncaught_exceptions()) {}

  [[nodiscard]] sync_mode mode() const noexcept { return mode_; }

  // check(): in raise mode, throws when the scope `g` (a sync_guard or host_sync_guard named
  // `name`) saw calls that no earlier check() reported, naming them with g.report().
  template <class Scope>
  void check(const Scope& g, const char* name) {
    const std::uint64_t seen = g.syncs() + g.allocations();
    if (mode_ != sync_mode::raise || seen == reported_) return;
    reported_ = seen;
    throw sync_error(std::string("ferry: ") + name + " (raise mode) saw " + std::to_string(g.syncs()) +
                     " synchronizing call(s) and " + std::to_string(g.allocations()) +
                     " allocation(s) or free(s) inside its scope: " + g.report());
  }

  // The destructor path: the same as check(), but only when no exception began unwinding since
  // the scope was made (throwing then would call std::terminate).
  template <class Scope>
  void check_at_exit(const Scope& g, const char* name) {
    if (std::uncaught_exceptions() > uncaught_) return;
    check(g, name);
  }

 private:
  sync_mode mode_;
  int uncaught_;
  std::uint64_t reported_ = 0;
};

}  // namespace ferry::detail
