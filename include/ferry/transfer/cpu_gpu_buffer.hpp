// ferry/transfer/cpu_gpu_buffer.hpp: cpu_gpu_buffer<T, Policies...>, a pinned host array paired
// with a device array of the same size (SPEC §5).
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/event.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_buffer.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/pinned_buffer.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/memory/slot_ring.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/transfer/detail/source.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace ferry {

/// `n` elements of pinned, mapped host memory (`host()`, zero-filled) and `n` elements of device
/// memory (`device()`, uninitialized), with stream-ordered copies between their prefixes. Only
/// copies touch host(): it works where kernels do not see pinned memory through its mapping.
///
/// Policies (in any order): ReusePolicy and Backend.
///  - `reuse::event_fenced` (default): copy_to_device snapshots host()[0, n) into a block of the
///    pinned arena (fenced on the stream) and copies from the snapshot, so host() may be rewritten
///    as soon as copy_to_device returns. Costs one memcpy of n elements on the host.
///  - `reuse::caller_fenced`: copy_to_device DMAs host() in place: the caller must not rewrite
///    host()[0, n) until the stream has passed the copy (e.g. one synchronization per step, or an
///    event recorded after the call).
/// copy_to_host always writes host() in place: read it once the returned event is ready.
///
/// n * sizeof(T) beyond size_t → std::invalid_argument at construction, nothing allocated.
/// Move-only; the destructor frees both arrays (on CUDA, cudaFreeHost and cudaFree wait for the
/// whole device: keep these for the life of the engine). Not thread-safe.
template <class T, class... Policies>
class cpu_gpu_buffer {
  static_assert((detail::check_element<T>(), true));
  using policies = detail::policies<detail::type_list<families::reuse, families::backend>,
                                      Policies...>;

 public:
  using value_type = T;                             ///< The element type.
  using backend_type = typename policies::backend;  ///< The backend (Backend policy).
  using reuse_policy = typename policies::reuse;    ///< Who fences host() (ReusePolicy).

 private:
  using B = backend_type;
  using ops = detail::backend_ops<B>;

 public:
  /// Allocates both arrays now (pinned and device allocations); staging through
  /// default_arena<B>().
  explicit cpu_gpu_buffer(std::size_t n) : cpu_gpu_buffer(n, default_arena<B>()) {}
  /// As above, staging through `arena` (which must outlive the buffer).
  cpu_gpu_buffer(std::size_t n, pinned_arena<B>& arena)
      : host_(n, copies_only), device_(n), arena_(&arena),
        device_id_(ops::current_device()) {}

  /// Takes over `o`'s arrays; spans handed out stay valid.
  cpu_gpu_buffer(cpu_gpu_buffer&&) noexcept = default;
  /// Swaps arrays with `o`.
  cpu_gpu_buffer& operator=(cpu_gpu_buffer&&) noexcept = default;

  /// The pinned host array.
  [[nodiscard]] pinned_span<T> host() const noexcept { return host_.host(); }
  /// The device array.
  [[nodiscard]] device_span<T> device() const noexcept { return device_.span(); }
  /// The number of elements of each array.
  [[nodiscard]] std::size_t size() const noexcept { return host_.size(); }

  /// Enqueues on `s` the copy of host()[0, n) into device()[0, n) and returns device().first(n).
  /// Never blocks the host. event_fenced: host() has been snapshotted when this returns (rewrite
  /// it at once); caller_fenced: see the class comment. n > size() → std::out_of_range, nothing
  /// enqueued; n == 0 enqueues nothing.
  device_span<T> copy_to_device(std::size_t n, stream_ref<B> s) {
    [[maybe_unused]] const auto on_device = ops::enter(s, device_id_);
    check_count("copy_to_device", n);
    if (n == 0) return device().first(0);
    const std::size_t bytes = detail::checked_bytes(n, sizeof(T), "cpu_gpu_buffer");
    detail::copy_from_host<reuse_policy>(*arena_, device_.data(), host_.host().data(), bytes, s);
    return device().first(n);
  }

  /// Enqueues on `s` the copy of device()[0, n) into host()[0, n); returns an event that is ready
  /// once host()[0, n) may be read (a stamp of the reuse core: no backend event is created per
  /// call). Never blocks the host. n > size() → std::out_of_range, nothing enqueued; n == 0
  /// enqueues nothing and returns an event that is already ready.
  [[nodiscard]] event<B> copy_to_host(std::size_t n, stream_ref<B> s) {
    [[maybe_unused]] const auto on_device = ops::enter(s, device_id_);
    check_count("copy_to_host", n);
    event<B> done;
    if (n == 0) return done;
    ops::copy_async(host_.host().data(), device_.data(),
                    detail::checked_bytes(n, sizeof(T), "cpu_gpu_buffer"), s);
    done.record(s);
    return done;
  }

 private:
  void check_count(const char* fn, std::size_t n) const {
    if (n > size())
      throw std::out_of_range(std::string("ferry: cpu_gpu_buffer::") + fn + ": n = " +
                              std::to_string(n) + " exceeds the size " + std::to_string(size()) +
                              "; nothing was enqueued");
  }

  pinned_buffer<T, B> host_;
  device_buffer<T, B> device_;
  pinned_arena<B>* arena_;
  int device_id_;
};

}  // namespace ferry
