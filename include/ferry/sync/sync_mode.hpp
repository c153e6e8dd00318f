// ferry/sync/sync_mode.hpp: the two modes of ferry's sync scopes (sync_guard, host_sync_guard); the
// rule both share for when a scope in raise mode throws is sync/detail/sync_verdict.hpp.
#pragma once

namespace ferry {

/// What a sync scope does with the synchronizing calls and allocations it sees. Both
/// ferry::sync_guard and ferry::host_sync_guard name it as their nested `mode`
/// (`ferry::sync_guard::mode::raise`).
enum class sync_mode {
  /// Count and name every call; never throw. Read syncs(), allocations(), report().
  record,
  /// As record, and check() throws ferry::sync_error naming the calls; so does the scope's
  /// destructor for calls no check() has reported, unless an exception is already unwinding.
  raise,
};

}  // namespace ferry
