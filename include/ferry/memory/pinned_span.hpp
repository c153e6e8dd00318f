// ferry/memory/pinned_span.hpp: pinned_span<T>, host memory that is pinned by type.
#pragma once

#include <ferry/memory/device_span.hpp>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <type_traits>

namespace ferry {

template <class T>
class pinned_span;

namespace detail {
template <class T>
constexpr pinned_span<T> make_pinned_span(T* p, std::size_t n) noexcept;
}

/// A host span whose memory is pinned (page-locked and mapped), known by its type: ferry's
/// owners hand them out, and ferry::assume_pinned() makes one from memory the caller pinned.
/// Copies from a pinned_span are DMA'd in place: the memory must stay unmodified until the
/// stream has passed the copy. Element access on the host.
template <class T>
class pinned_span {
 public:
  using element_type = T;                  ///< The element type, with cv.
  using value_type = std::remove_cv_t<T>;  ///< The element type, without cv.
  using iterator = T*;                     ///< A plain pointer.

  /// An empty span.
  constexpr pinned_span() noexcept = default;
  /// pinned_span<T> converts to pinned_span<const T>.
  template <class U>
    requires(!std::is_same_v<U, T> && std::is_convertible_v<U (*)[], T (*)[]>)
  constexpr pinned_span(pinned_span<U> o) noexcept : data_(o.data()), size_(o.size()) {}

  /// The host address of the first element.
  [[nodiscard]] constexpr T* data() const noexcept { return data_; }
  /// The number of elements.
  [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
  /// size() * sizeof(T).
  [[nodiscard]] constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// size() == 0.
  [[nodiscard]] constexpr bool empty() const noexcept { return size_ == 0; }
  /// The first element.
  [[nodiscard]] constexpr T* begin() const noexcept { return data_; }
  /// One past the last element.
  [[nodiscard]] constexpr T* end() const noexcept { return data_ + size_; }
  /// Element `i`, unchecked.
  [[nodiscard]] constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// The same elements as a std::span (which no longer says "pinned").
  [[nodiscard]] constexpr std::span<T> span() const noexcept { return {data_, size_}; }

  /// The first `n` elements; n > size() throws std::out_of_range.
  [[nodiscard]] constexpr pinned_span first(std::size_t n) const {
    if (n > size_) throw std::out_of_range("pinned_span::first: count exceeds size");
    return {data_, n};
  }
  /// `count` elements from `offset` (to the end by default); out of bounds throws
  /// std::out_of_range.
  [[nodiscard]] constexpr pinned_span subspan(std::size_t offset,
                                              std::size_t count = static_cast<std::size_t>(-1)) const {
    if (offset > size_) throw std::out_of_range("pinned_span::subspan: offset exceeds size");
    if (count == static_cast<std::size_t>(-1)) count = size_ - offset;
    if (count > size_ - offset)
      throw std::out_of_range("pinned_span::subspan: offset + count exceeds size");
    return {data_ + offset, count};
  }
  /// The same memory as seen by kernels (UVA: the same address).
  [[nodiscard]] constexpr device_span<T> mapped() const noexcept { return {data_, size_}; }

 private:
  constexpr pinned_span(T* p, std::size_t n) noexcept : data_(p), size_(n) {}
  template <class U>
  friend constexpr pinned_span<U> detail::make_pinned_span(U*, std::size_t) noexcept;
  template <class U>
  friend class pinned_span;

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {
template <class T>
constexpr pinned_span<T> make_pinned_span(T* p, std::size_t n) noexcept {
  return pinned_span<T>(p, n);
}
}  // namespace detail

/// Declares that `s` lies in memory the caller pinned and mapped (cudaHostAlloc with the mapped
/// flag, or cudaHostRegister with mapped): the caller's promise, not checked on the hot path.
template <class T, std::size_t Extent>
[[nodiscard]] constexpr pinned_span<T> assume_pinned(std::span<T, Extent> s) noexcept {
  return detail::make_pinned_span(s.data(), s.size());
}

}  // namespace ferry
