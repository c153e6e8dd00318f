// ferry/memory/device_span.hpp: device_span<T>, a pointer and a size that kernels can use.
#pragma once

#include <ferry/config.hpp>

#include <cstddef>
#include <stdexcept>
#include <type_traits>

// CCCL interop: device_span<T> converts to cuda::std::span where CCCL is on the include path.
#if __has_include(<cuda/std/span>)
#include <cuda/std/span>
#define FERRY_HAS_CCCL_SPAN 1
#else
#define FERRY_HAS_CCCL_SPAN 0
#endif

namespace ferry {

/// A view of `size()` elements at a device-accessible address (device memory, or pinned memory
/// through UVA) on any backend. Trivially copyable; pass it to kernels by value. The same type in
/// host-compiled and nvcc-compiled translation units. `operator[]` works in device code and, where
/// the address is host-accessible (the host backend's memory, pinned memory through UVA), on the
/// host; read device memory back with ferry::async_d2h.
template <class T>
class device_span {
 public:
  using element_type = T;                  ///< The element type, with cv.
  using value_type = std::remove_cv_t<T>;  ///< The element type, without cv.
  using size_type = std::size_t;           ///< The size type.

  /// An empty span.
  constexpr device_span() noexcept = default;
  /// Views `n` elements at the device-accessible address `p`.
  FERRY_HOST_DEVICE constexpr device_span(T* p, std::size_t n) noexcept : data_(p), size_(n) {}
  /// device_span<T> converts to device_span<const T>.
  template <class U>
    requires(!std::is_same_v<U, T> && std::is_convertible_v<U (*)[], T (*)[]>)
  FERRY_HOST_DEVICE constexpr device_span(device_span<U> o) noexcept
      : data_(o.data()), size_(o.size()) {}

  /// The device-accessible address of the first element.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  /// The number of elements.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr std::size_t size() const noexcept { return size_; }
  /// size() * sizeof(T).
  [[nodiscard]] FERRY_HOST_DEVICE constexpr std::size_t size_bytes() const noexcept {
    return size_ * sizeof(T);
  }
  /// size() == 0.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr bool empty() const noexcept { return size_ == 0; }

  /// The first `n` elements; on the host, n > size() throws std::out_of_range.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr device_span first(std::size_t n) const {
    check(n <= size_, "device_span::first: count exceeds size");
    return {data_, n};
  }
  /// `count` elements from `offset` (to the end when count is npos); checked on the host.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr device_span subspan(std::size_t offset,
                                                                std::size_t count = npos) const {
    check(offset <= size_, "device_span::subspan: offset exceeds size");
    if (count == npos) count = size_ - offset;
    check(count <= size_ - offset, "device_span::subspan: offset + count exceeds size");
    return {data_ + offset, count};
  }

  /// Element `i`: unchecked in device code; on the host, i >= size() throws std::out_of_range.
  /// On the host the address must be host-accessible (the host backend's memory, pinned memory
  /// through UVA): CUDA device memory is not, and reading it there is undefined.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr T& operator[](std::size_t i) const {
    check(i < size_, "device_span::operator[]: index out of range");
    return data_[i];
  }

#if FERRY_HAS_CCCL_SPAN
  // ---- CCCL interop ----
  /// The same elements as a cuda::std::span<U> (U is T or const T). Explicit: a cuda::std::span
  /// allows host element access, which device memory does not.
  template <class U>
    requires std::is_convertible_v<T (*)[], U (*)[]>
  FERRY_HOST_DEVICE constexpr explicit operator ::cuda::std::span<U>() const noexcept {
    return ::cuda::std::span<U>(data_, size_);
  }
#endif

  /// subspan()'s "to the end" count.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

 private:
  FERRY_HOST_DEVICE static constexpr void check(bool ok, const char* what) {
#if !defined(__CUDA_ARCH__)
    if (!ok) throw std::out_of_range(what);
#else
    (void)ok;
    (void)what;
#endif
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ferry
