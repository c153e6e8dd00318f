// ferry/memory/pinned_buffer.hpp: pinned_buffer<T, B> (alias uva_buffer), pinned and mapped host
// memory that the host writes and kernels read in place through UVA.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/mapping.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_span.hpp>

#include <cstddef>
#include <utility>

namespace ferry {

/// The tag of pinned_buffer's constructor for memory that only copies use.
struct copies_only_t {
  explicit copies_only_t() = default;
};
/// pinned_buffer(n, ferry::copies_only): memory that only copies use (no kernel reads it through
/// the mapping), made also where the mapping is not live.
inline constexpr copies_only_t copies_only{};

/// `n` zero-filled elements of pinned, mapped host memory: `host()` for the host, `device()` for
/// kernels (the UVA view of the same bytes). Move-only; the destructor frees the memory, which on
/// CUDA (cudaFreeHost) waits for the whole device: keep these for the life of the engine. On a
/// device whose mapping ferry's probe finds dead (kernels do not see the host's writes through it:
/// Confidential Computing, WSL2), construction throws ferry::error naming the cause and the way
/// out (docs/troubleshooting.md, "The mapping is not live").
template <class T, class B = default_backend>
class pinned_buffer {
  static_assert((detail::check_element<T>(), true));
  static_assert((detail::check_backend<B>(), true));
  using ops = detail::backend_ops<B>;

 public:
  using value_type = T;    ///< The element type.
  using backend_type = B;  ///< The backend.

  /// An empty buffer.
  pinned_buffer() noexcept = default;
  /// `n` zero-filled elements (cudaHostAlloc, mapped and portable). Throws
  /// std::invalid_argument, allocating nothing, when n * sizeof(T) does not fit in size_t; and
  /// ferry::error on a device whose mapping is not live (see the class comment).
  explicit pinned_buffer(std::size_t n) : data_(allocate(n, true)), size_(n) {}
  /// `n` zero-filled elements for copies only (async_h2d from host(), async_d2h into it, as
  /// cpu_gpu_buffer uses its own): no live mapping is needed, so this works on a device whose
  /// mapping is not live, where device() must then never be read by a kernel.
  pinned_buffer(std::size_t n, copies_only_t) : data_(allocate(n, false)), size_(n) {}
  /// Takes over `o`'s memory; `o` is left empty.
  pinned_buffer(pinned_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  /// Swaps contents with `o`.
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~pinned_buffer() { ops::free_pinned(data_); }

  /// The memory, for the host.
  [[nodiscard]] pinned_span<T> host() const noexcept { return detail::make_pinned_span(data_, size_); }
  /// The same memory, for kernels (the UVA view).
  [[nodiscard]] device_span<T> device() const noexcept {
    return {static_cast<T*>(ops::mapped(data_)), size_};
  }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  // n elements, checked; read in place by kernels (`mapped`): only where the mapping is live.
  static T* allocate(std::size_t n, bool mapped) {
    const std::size_t bytes = detail::checked_bytes(n, sizeof(T), "pinned_buffer");
    if (mapped) detail::require_live_mapping<B>(ops::current_device(), "pinned_buffer");
    return static_cast<T*>(ops::alloc_pinned(bytes));
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A pinned_buffer, named for its use: memory that kernels read in place through UVA.
template <class T, class B = default_backend>
using uva_buffer = pinned_buffer<T, B>;

}  // namespace ferry
