// ferry/sync/host_sync_guard.hpp: the host backend's sync scope, with the interface of
// ferry::sync_guard, built on the host backend's own counters (ferry::backend_stats_of).
#pragma once

#include <ferry/backend/stats.hpp>
#include <ferry/config.hpp>
#include <ferry/policies/backend.hpp>
#include <ferry/sync/detail/sync_verdict.hpp>
#include <ferry/sync/sync_mode.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

/// The host backend's counterpart of ferry::sync_guard: an RAII scope that reports every
/// synchronizing call (stream/event synchronize, blocking copy) and every allocation or freeing
/// of pinned or device memory that ferry's host backend performed while it was alive, with the
/// same syncs() / allocations() / report() / check() interface, so that a zero-sync proof is
/// written once for both backends through ferry::sync_scope<B> (<ferry/sync/sync_guard.hpp>).
///
/// It differs from sync_guard in what it can see: it reads the process-wide counters of
/// ferry::backend_stats_of<backend::host>() at construction and on every query, so it counts the
/// host backend calls of every thread (not only the calling thread's), and only the calls ferry
/// makes (the host backend has no others). Cheap (a few relaxed atomic loads per query); no
/// subscription, never fails to construct. Like sync_guard, it is a scope: keep it as a local
/// variable (its destructor may throw in raise mode, see ~host_sync_guard).
class host_sync_guard {
 public:
  /// sync_mode::record or sync_mode::raise (host_sync_guard::mode::raise).
  using mode = sync_mode;

  /// Starts counting from now.
  explicit host_sync_guard(mode m = mode::record) noexcept
      : verdict_(m), start_(backend_stats_of<backend::host>()) {}
  host_sync_guard(const host_sync_guard&) = delete;
  host_sync_guard& operator=(const host_sync_guard&) = delete;

  /// In raise mode, throws ferry::sync_error (with report()) when this scope saw calls that no
  /// check() has reported yet, unless an exception is already unwinding through the scope (then
  /// it stays silent: call check() before leaving the scope to see those). Record mode never
  /// throws.
  ~host_sync_guard() noexcept(false) {
    verdict_.check_at_exit(*this, "host_sync_guard");
  }

  /// The mode given at construction.
  [[nodiscard]] mode guard_mode() const noexcept { return verdict_.mode(); }

  /// Host-blocking waits ferry's host backend made since construction (any thread).
  [[nodiscard]] std::uint64_t syncs() const noexcept {
    return backend_stats_of<backend::host>().synchronizations - start_.synchronizations;
  }

  /// Allocations plus frees of pinned and device memory since construction (any thread).
  [[nodiscard]] std::uint64_t allocations() const noexcept {
    const backend_stats d = delta();
    return d.pinned_allocations + d.pinned_frees + d.device_allocations + d.device_frees;
  }

  /// How many calls of the kind `what` were seen, by the names report() uses: "synchronizations",
  /// "pinned allocations", "pinned frees", "device allocations", "device frees" (sync_guard's
  /// count() takes CUDA API names instead). 0 for any other name.
  [[nodiscard]] std::uint64_t count(std::string_view what) const {
    std::uint64_t n = 0;
    each_kind(delta(), [&](std::string_view name, std::uint64_t k) {
      if (name == what) n = k;
    });
    return n;
  }

  /// Names each kind of call seen with its count, e.g. "host backend: synchronizations x2, pinned
  /// allocations x1"; "host backend: no synchronizing calls and no allocations" when none.
  [[nodiscard]] std::string report() const {
    std::string out;
    each_kind(delta(), [&](std::string_view what, std::uint64_t n) {
      if (n == 0) return;
      out += out.empty() ? "host backend: " : ", ";
      out += what;
      out += " x" + std::to_string(n);
    });
    return out.empty() ? std::string("host backend: no synchronizing calls and no allocations") : out;
  }

  /// In raise mode, throws ferry::sync_error naming the calls seen since construction (or since
  /// the last check() that threw) when there are any. Record mode: does nothing.
  void check() {
    verdict_.check(*this, "host_sync_guard");
  }

 private:
  template <class F>
  static void each_kind(const backend_stats& d, F&& f) {
    f("synchronizations", d.synchronizations);
    f("pinned allocations", d.pinned_allocations);
    f("pinned frees", d.pinned_frees);
    f("device allocations", d.device_allocations);
    f("device frees", d.device_frees);
  }
  [[nodiscard]] backend_stats delta() const noexcept {
    const backend_stats now = backend_stats_of<backend::host>();
    return {now.pinned_allocations - start_.pinned_allocations, now.pinned_frees - start_.pinned_frees,
            now.device_allocations - start_.device_allocations, now.device_frees - start_.device_frees,
            now.synchronizations - start_.synchronizations};
  }

  detail::sync_verdict verdict_;
  backend_stats start_;
};

namespace detail {
template <class B>
struct sync_scope_of {
  static_assert(dependent_false<B>, "ferry::sync_scope<B>: B is ferry::backend::host, or ferry::backend::cuda with "
                                    "<ferry/sync/sync_guard.hpp> included (it needs CUPTI).");
};
template <>
struct sync_scope_of<backend::host> {
  using type = host_sync_guard;
};
}  // namespace detail

/// The sync scope of backend B, so that a zero-sync proof is written once for both backends:
/// ferry::sync_guard for backend::cuda (CUPTI, this thread's calls; <ferry/sync/sync_guard.hpp>),
/// ferry::host_sync_guard for backend::host (ferry's host backend counters, every thread; here, so
/// that <ferry/ferry.hpp> has it). Both have `mode`, syncs(), allocations(), report() and check(),
/// and throw ferry::sync_error the same way in raise mode:
///   ferry::sync_scope<B> guard(ferry::sync_mode::raise);
///   for (int i = 0; i < 1000; ++i) step(stream);
///   guard.check();
template <class B>
using sync_scope = typename detail::sync_scope_of<B>::type;

}  // namespace ferry
