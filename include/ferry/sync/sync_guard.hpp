// ferry/sync/sync_guard.hpp: ferry::sync_guard, a scope that catches every synchronizing CUDA
// runtime call and every allocation made inside it (through CUPTI), and ferry::sync_scope<B>,
// the same interface for either backend. Link the ferry::sync_guard CMake target (it adds CUPTI;
// ferry::ferry never links CUPTI). Not part of <ferry/ferry.hpp>.
#pragma once

#include <ferry/backend/stats.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>
#include <ferry/sync/detail/sync_verdict.hpp>
#include <ferry/sync/host_sync_guard.hpp>
#include <ferry/sync/sync_mode.hpp>

#if FERRY_HAS_CUDA
#include <ferry/sync/detail/cupti_hooks.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>
#endif

namespace ferry {

#if FERRY_HAS_CUDA
/// An RAII scope that records every synchronizing CUDA runtime call and every allocation made on
/// the calling thread while it is alive, through a CUPTI runtime-API callback:
///  - synchronization: cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize (and the
///    deprecated cudaThreadSynchronize);
///  - synchronous copies and fills: cudaMemcpy, cudaMemcpy2D/3D, cudaMemcpyPeer, cudaMemcpy3DPeer,
///    cudaMemcpyTo/FromSymbol, the array copies, cudaMemset, cudaMemset2D/3D;
///  - async copies that touch pageable host memory (they block the host while the driver stages
///    them): cudaMemcpyAsync, cudaMemcpy2D/3DAsync, cudaMemcpyTo/FromSymbolAsync, the array
///    async copies, cudaMemcpyBatchAsync. The host-side pointer is classified when the call is
///    entered with cudaPointerGetAttributes: cudaMemoryTypeUnregistered (or unknown to CUDA) is
///    pageable; pinned (cudaHostAlloc, cudaMallocHost, cudaHostRegister), managed and device memory
///    are not, so an async copy from pinned memory is not counted;
///  - allocation or freeing of device, pinned, registered, managed or array memory: cudaMalloc,
///    cudaMallocPitch, cudaMalloc3D, cudaMallocManaged, cudaMallocArray, cudaMalloc3DArray,
///    cudaMallocMipmappedArray, cudaMallocAsync, cudaMallocFromPoolAsync, cudaMallocHost,
///    cudaHostAlloc, cudaHostRegister, cudaFree, cudaFreeAsync, cudaFreeArray,
///    cudaFreeMipmappedArray, cudaFreeHost, cudaHostUnregister.
/// Calls through ferry count like any other (ferry::stream::synchronize is a
/// cudaStreamSynchronize); ferry's own bounded waits, which poll, count as syncs() too. Launches, event record/query, stream waits and queries, async copies
/// between pinned or device memory and cudaMemsetAsync are not counted.
///
/// Threads: a guard counts only the calls of the thread that made it (another thread's calls,
/// and work ferry hands to helper threads, are not seen), and must be destroyed on that thread.
/// Guards on different threads are independent; nested guards on one thread each count every
/// call made inside them. It is not movable: keep it as a local variable.
///
/// CUPTI allows one subscriber per process. All live guards share one subscription (made by the
/// first guard, released by the last). If CUPTI cannot be subscribed — no CUDA device or driver,
/// another tool holds it (compute-sanitizer, Nsight Systems/Compute, a profiler), or CUPTI
/// delivers no callback for a test call — the constructor throws ferry::error: never a silent
/// zero. Run zero-sync proofs outside compute-sanitizer.
///
/// Cost: the first guard of a process subscribes; while any guard is alive every hooked call
/// costs a callback, and an async copy also a cudaPointerGetAttributes (docs/sync_guard.md,
/// "Cost"). Timed runs hold no guard: count in an untimed pass.
///
/// Modes: sync_mode::record (sync_guard::mode::record) only counts; read syncs(), allocations(),
/// report(). sync_mode::raise also makes check() throw ferry::sync_error naming the calls, and
/// the destructor throws it for calls no check() has reported — but never while an exception is
/// already unwinding through the scope (std::uncaught_exceptions() compared with its value at
/// construction). The CUPTI callback itself only records; nothing is ever thrown through the
/// driver.
class sync_guard {
 public:
  /// sync_mode::record or sync_mode::raise (sync_guard::mode::raise).
  using mode = sync_mode;

  /// Starts recording the calling thread's calls. Throws ferry::error when CUPTI cannot be
  /// subscribed (see the class comment); then nothing is recorded and nothing is held.
  explicit sync_guard(mode m = mode::record)
      : verdict_(m), owner_(std::this_thread::get_id()), waits_(detail::blocking_waits) {
    detail::cupti_subscription::instance().acquire();
    detail::sync_thread_state& t = detail::sync_thread();
    node_.outer = t.innermost;
    t.innermost = &node_;
  }
  sync_guard(const sync_guard&) = delete;
  sync_guard& operator=(const sync_guard&) = delete;

  /// Stops recording and releases the shared subscription (the last guard unsubscribes). Then, in
  /// raise mode only, throws ferry::sync_error when this scope saw calls that no check() has
  /// reported, unless an exception is already unwinding (then it is silent: call check() before
  /// the scope ends to see those). Destroying a guard on another thread than the one that made
  /// it is a programming error that aborts with a message.
  ~sync_guard() noexcept(false) {
    if (std::this_thread::get_id() != owner_) {
      std::fputs("ferry::sync_guard destroyed on another thread than the one that made it\n", stderr);
      std::abort();
    }
    detail::sync_thread_state& t = detail::sync_thread();
    for (detail::sync_guard_node** p = &t.innermost; *p != nullptr; p = &(*p)->outer) {
      if (*p == &node_) {
        *p = node_.outer;
        break;
      }
    }
    detail::cupti_subscription::instance().release();
    verdict_.check_at_exit(*this, "sync_guard");
  }

  /// The mode given at construction.
  [[nodiscard]] mode guard_mode() const noexcept { return verdict_.mode(); }

  /// Synchronizing calls seen so far: synchronize calls, synchronous copies and fills, async
  /// copies that touched pageable host memory, and ferry's own waits that blocked (a full ring's
  /// back-pressure, ferry::event::synchronize, a blocking copy, a destructor's device
  /// synchronize: ferry bounds its waits, so it polls instead of calling cudaEventSynchronize, or
  /// calls cudaDeviceSynchronize on a helper thread; see ferry::wait_timeout).
  [[nodiscard]] std::uint64_t syncs() const noexcept {
    return sum([](detail::sync_hook_kind k) { return k != detail::sync_hook_kind::allocate; }) +
           ferry_waits();
  }

  /// Allocations and frees of device, pinned, registered, managed or array memory seen so far.
  [[nodiscard]] std::uint64_t allocations() const noexcept {
    return sum([](detail::sync_hook_kind k) { return k == detail::sync_hook_kind::allocate; });
  }

  /// How many times the runtime API `api` (e.g. "cudaStreamSynchronize", "cudaMemcpyAsync") was
  /// counted; per-thread-stream variants count under the plain name. 0 for a name not hooked.
  [[nodiscard]] std::uint64_t count(std::string_view api) const {
    std::uint64_t n = 0;
    for (std::size_t h = 0; h < detail::sync_hook_count; ++h)
      if (detail::sync_hook_name(h) == api) n += node_.counts[h].load(std::memory_order_relaxed);
    return n;
  }

  /// Each call seen, by name, with its count, in a fixed order: synchronization first, then
  /// copies, then allocations, e.g. "cudaStreamSynchronize x3, cudaMemcpyAsync (pageable host
  /// memory) x1, cudaMalloc x2"; "no synchronizing calls and no allocations" when none.
  [[nodiscard]] std::string report() const {
    std::vector<std::pair<std::string, std::uint64_t>> seen;
    for (std::size_t h = 0; h < detail::sync_hook_count; ++h) {
      const std::uint64_t n = node_.counts[h].load(std::memory_order_relaxed);
      if (n == 0) continue;
      std::string name = detail::sync_hook_name(h);
      if (detail::sync_hooks[h].kind == detail::sync_hook_kind::async) name += " (pageable host memory)";
      bool merged = false;
      for (auto& [s, c] : seen)
        if (s == name) c += n, merged = true;
      if (!merged) seen.emplace_back(std::move(name), n);
    }
    if (const std::uint64_t w = ferry_waits(); w != 0)
      seen.emplace_back("ferry's own bounded waits (a full ring, an event, a blocking copy, a device synchronize)", w);
    if (seen.empty()) return "no synchronizing calls and no allocations";
    std::string out;
    for (const auto& [s, c] : seen) out += (out.empty() ? "" : ", ") + s + " x" + std::to_string(c);
    return out;
  }

  /// In raise mode, throws ferry::sync_error naming the calls seen since construction (or since
  /// the last check() that threw) when there are any. Record mode: does nothing.
  void check() {
    verdict_.check(*this, "sync_guard");
  }

 private:
  template <class Pred>
  [[nodiscard]] std::uint64_t sum(Pred pred) const noexcept {
    std::uint64_t n = 0;
    for (std::size_t h = 0; h < detail::sync_hook_count; ++h)
      if (pred(detail::sync_hooks[h].kind)) n += node_.counts[h].load(std::memory_order_relaxed);
    return n;
  }
  [[nodiscard]] std::uint64_t ferry_waits() const noexcept { return detail::blocking_waits - waits_; }

  detail::sync_verdict verdict_;
  std::thread::id owner_;
  std::uint64_t waits_;  // this thread's blocking_waits when the guard was made
  detail::sync_guard_node node_;
};
#endif  // FERRY_HAS_CUDA

namespace detail {
template <class B>
struct sync_scope_of {
  static_assert(dependent_false<B>, "ferry::sync_scope<B> needs B to be ferry::backend::cuda or ferry::backend::host.");
};
template <>
struct sync_scope_of<backend::host> {
  using type = host_sync_guard;
};
#if FERRY_HAS_CUDA
template <>
struct sync_scope_of<backend::cuda> {
  using type = sync_guard;
};
#endif
}  // namespace detail

/// The sync scope of backend B, so that a zero-sync proof is written once for both backends:
/// ferry::sync_guard for backend::cuda (CUPTI, this thread's calls), ferry::host_sync_guard for
/// backend::host (ferry's host backend counters, every thread). Both have `mode`, syncs(),
/// allocations(), report() and check(), and throw ferry::sync_error the same way in raise mode:
///   ferry::sync_scope<B> guard(ferry::sync_mode::raise);
///   for (int i = 0; i < 1000; ++i) step(stream);
///   guard.check();
template <class B>
using sync_scope = typename detail::sync_scope_of<B>::type;

}  // namespace ferry
