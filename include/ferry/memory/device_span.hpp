// ferry/memory/device_span.hpp: device_span<T>, a pointer and a size that kernels can use.
#pragma once

#include <ferry/config.hpp>
#include <ferry/detail/view_generation.hpp>

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

// Checked views (FERRY_CHECKED_VIEWS 1) are another type for the linker, so that translation
// units built with and without the mode cannot pass views to one another unnoticed.
#if FERRY_CHECKED_VIEWS
#define FERRY_VIEW_ABI [[gnu::abi_tag("ferry_checked_views")]]
#else
#define FERRY_VIEW_ABI
#endif

namespace ferry {

namespace detail {
struct view_stamper;  // (no forward declaration of device_span: nvcc would drop its ABI tag there)
}  // namespace detail

/// A view of `size()` elements at a device-accessible address (device memory, or pinned memory
/// through UVA) on any backend. Trivially copyable; pass it to kernels by value. The same type in
/// host-compiled and nvcc-compiled translation units. `operator[]` works in device code and, where
/// the address is host-accessible (the host backend's memory, pinned memory through UVA), on the
/// host; read device memory back with ferry::async_d2h.
///
/// With FERRY_CHECKED_VIEWS 1, a view of a rotating slot (uva_pool::copy_to_uva, uva_backed::
/// publish, step_batch's publish::view) also carries its slot's generation, and `operator[]` on
/// the host throws ferry::error once the slot has been handed out again (a stale view); `data()`
/// stays unchecked.
template <class T>
class FERRY_VIEW_ABI device_span {
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
      : data_(o.data()),
        size_(o.size())
#if FERRY_CHECKED_VIEWS
        ,
        gen_(o.gen_),
        seen_(o.seen_)
#endif
  {
  }

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
    return same_slot(data_, n);
  }
  /// `count` elements from `offset` (to the end when count is npos); checked on the host.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr device_span subspan(std::size_t offset,
                                                                std::size_t count = npos) const {
    check(offset <= size_, "device_span::subspan: offset exceeds size");
    if (count == npos) count = size_ - offset;
    check(count <= size_ - offset, "device_span::subspan: offset + count exceeds size");
    return same_slot(data_ + offset, count);
  }

  /// Element `i`: unchecked in device code; on the host, i >= size() throws std::out_of_range.
  /// On the host the address must be host-accessible (the host backend's memory, pinned memory
  /// through UVA): CUDA device memory is not, and reading it there is undefined.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr T& operator[](std::size_t i) const {
    check(i < size_, "device_span::operator[]: index out of range");
#if FERRY_CHECKED_VIEWS && !defined(__CUDA_ARCH__)
    if (gen_ && gen_->count.load(std::memory_order_acquire) != seen_) [[unlikely]]
      detail::throw_stale_view(*gen_, seen_);
#endif
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
  template <class>
  friend class device_span;
  friend struct detail::view_stamper;

  // A view of other elements of the same slot (first, subspan): the same generation.
  FERRY_HOST_DEVICE constexpr device_span same_slot(T* p, std::size_t n) const noexcept {
    device_span v(p, n);
#if FERRY_CHECKED_VIEWS
    v.gen_ = gen_;
    v.seen_ = seen_;
#endif
    return v;
  }

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
#if FERRY_CHECKED_VIEWS
  const detail::view_counter* gen_ = nullptr;  // the slot's counter (null: not a slot's view)
  std::uint64_t seen_ = 0;                     // its count when the view was made
#endif
};

namespace detail {
struct view_stamper {
  template <class T>
  static device_span<T> stamp([[maybe_unused]] device_span<T> v, [[maybe_unused]] slot_generation& g,
                              [[maybe_unused]] const char* owner) {
#if FERRY_CHECKED_VIEWS
    const auto [counter, count] = g.stamp(owner);
    v.gen_ = counter;
    v.seen_ = count;
#endif
    return v;
  }
#if FERRY_CHECKED_VIEWS
  /// The slot counter and count `v` carries (null: not a slot's view).
  template <class T>
  static std::pair<const view_counter*, std::uint64_t> generation_of(device_span<T> v) noexcept {
    return {v.gen_, v.seen_};
  }
#endif
};

/// `v`, a view of the slot whose generation is `g`, owned by the component `owner`: carries the
/// slot's generation under FERRY_CHECKED_VIEWS, and is `v` itself otherwise (no cost).
template <class T>
device_span<T> stamp_view(device_span<T> v, slot_generation& g, const char* owner) {
  return view_stamper::stamp(v, g, owner);
}
}  // namespace detail

}  // namespace ferry
