// ferry/memory/pinned_buffer.hpp: pinned_buffer<T, B> (alias uva_buffer), pinned and mapped host
// memory that the host writes and kernels read in place through UVA.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_span.hpp>

#include <cstddef>
#include <utility>

namespace ferry {

/// `n` zero-filled elements of pinned, mapped host memory: `host()` for the host, `device()` for
/// kernels (the UVA view of the same bytes). Move-only; the destructor frees the memory, which on
/// CUDA (cudaFreeHost) waits for the whole device: keep these for the life of the engine.
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
  /// std::invalid_argument, allocating nothing, when n * sizeof(T) does not fit in size_t.
  explicit pinned_buffer(std::size_t n)
      : data_(static_cast<T*>(
            ops::alloc_pinned(detail::checked_bytes(n, sizeof(T), "pinned_buffer")))),
        size_(n) {}
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
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A pinned_buffer, named for its use: memory that kernels read in place through UVA.
template <class T, class B = default_backend>
using uva_buffer = pinned_buffer<T, B>;

}  // namespace ferry
