// ferry/memory/staged_view.hpp: the 2-D view of device-accessible rows (a staged-write target, a
// uva_pool's rows) that device code indexes.
#pragma once

#include <ferry/config.hpp>
#include <ferry/detail/view_generation.hpp>
#include <ferry/memory/device_span.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

// FERRY_HAS_MDSPAN picks staged_view's type. The ferry::ferry CMake target sets it once for every
// translation unit (and puts CUDA 13's include/cccl on the host compiler's path), so that nvcc and
// the host compiler agree; __has_include would differ between them.
#ifndef FERRY_HAS_MDSPAN
#define FERRY_HAS_MDSPAN 0
#endif
#if FERRY_HAS_MDSPAN
#include <cuda/std/mdspan>
#endif

namespace ferry {

namespace detail {
struct rows_stamper;
#if FERRY_CHECKED_VIEWS
/// Throws when the generation a checked 2-D view carries is no longer its slot's.
FERRY_HOST_DEVICE constexpr void check_current([[maybe_unused]] const view_counter* gen,
                                               [[maybe_unused]] std::uint64_t seen) {
#if !defined(__CUDA_ARCH__)
  if (gen && gen->count.load(std::memory_order_acquire) != seen) [[unlikely]]
    throw_stale_view(*gen, seen);
#endif
}
#endif
}  // namespace detail

/// A row-major rows x cols view of elements at a device-accessible address, for builds without
/// <cuda/std/mdspan>: `extent(0)` (rows), `extent(1)` (cols), `operator()(r, c)` and
/// `data_handle()`, as mdspan spells them. Trivially copyable; pass it to kernels by value.
template <class T>
class matrix_view {
 public:
  using element_type = T;          ///< The element type.
  using index_type = std::size_t;  ///< The index type (64-bit).

  constexpr matrix_view() noexcept = default;
  /// Views `rows` x `cols` elements at `p`, row-major.
  FERRY_HOST_DEVICE constexpr matrix_view(T* p, std::size_t rows, std::size_t cols) noexcept
      : data_(p), rows_(rows), cols_(cols) {}

  /// The number of rows (r == 0) or columns (r == 1).
  [[nodiscard]] FERRY_HOST_DEVICE constexpr std::size_t extent(std::size_t r) const noexcept {
    return r == 0 ? rows_ : cols_;
  }
  /// rows x cols.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr std::size_t size() const noexcept { return rows_ * cols_; }
  /// The first element.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr T* data_handle() const noexcept { return data_; }
  /// Element [r][c] (device code on the CUDA backend; host code on the host backend). With
  /// FERRY_CHECKED_VIEWS, a host read through a stale view of a rotating slot throws ferry::error.
  [[nodiscard]] FERRY_HOST_DEVICE constexpr T& operator()(std::size_t r, std::size_t c) const
#if !FERRY_CHECKED_VIEWS
      noexcept
#endif
  {
#if FERRY_CHECKED_VIEWS
    detail::check_current(gen_, seen_);
#endif
    return data_[r * cols_ + c];
  }

 private:
  friend struct detail::rows_stamper;
  T* data_ = nullptr;
  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
#if FERRY_CHECKED_VIEWS
  const detail::view_counter* gen_ = nullptr;  // the slot's counter (null: not a slot's view)
  std::uint64_t seen_ = 0;                     // its count when the view was made
#endif
};

#if FERRY_HAS_MDSPAN && FERRY_CHECKED_VIEWS
/// The accessor of ferry::staged_view in a FERRY_CHECKED_VIEWS build: element access as
/// cuda::std::default_accessor's, and a host read through a view of a rotating slot that has been
/// handed out again throws ferry::error.
template <class T>
class checked_accessor {
 public:
  using offset_policy = checked_accessor;  ///< The accessor of a sub-view.
  using element_type = T;                  ///< The element type.
  using reference = T&;                    ///< What access() returns.
  using data_handle_type = T*;             ///< The pointer type.

  constexpr checked_accessor() noexcept = default;
  /// checked_accessor<T> converts to checked_accessor<const T>, keeping the generation.
  template <class U>
    requires(std::is_convertible_v<U (*)[], T (*)[]>)
  FERRY_HOST_DEVICE constexpr checked_accessor(checked_accessor<U> o) noexcept : gen_(o.gen_), seen_(o.seen_) {}
  /// p[i], after the check on the host.
  FERRY_HOST_DEVICE constexpr reference access(data_handle_type p, std::size_t i) const {
    detail::check_current(gen_, seen_);
    return p[i];
  }
  /// p + i.
  FERRY_HOST_DEVICE constexpr data_handle_type offset(data_handle_type p, std::size_t i) const noexcept {
    return p + i;
  }

 private:
  template <class>
  friend class checked_accessor;
  friend struct detail::rows_stamper;
  const detail::view_counter* gen_ = nullptr;
  std::uint64_t seen_ = 0;
};
#endif

#if FERRY_HAS_MDSPAN && FERRY_CHECKED_VIEWS
/// The 2-D view of a staged-write target: cuda::std::mdspan (row-major, 64-bit extents) where
/// CUDA's <cuda/std/mdspan> is available, ferry::matrix_view otherwise. Usable in device code.
/// (FERRY_CHECKED_VIEWS: with ferry::checked_accessor.)
template <class T>
using staged_view =
    cuda::std::mdspan<T, cuda::std::dextents<std::size_t, 2>, cuda::std::layout_right, checked_accessor<T>>;
#elif FERRY_HAS_MDSPAN
/// The 2-D view of a staged-write target: cuda::std::mdspan (row-major, 64-bit extents) where
/// CUDA's <cuda/std/mdspan> is available, ferry::matrix_view otherwise. Usable in device code.
template <class T>
using staged_view = cuda::std::mdspan<T, cuda::std::dextents<std::size_t, 2>>;
#else
/// The 2-D view of a staged-write target: cuda::std::mdspan (row-major, 64-bit extents) where
/// CUDA's <cuda/std/mdspan> is available, ferry::matrix_view otherwise. Usable in device code.
template <class T>
using staged_view = matrix_view<T>;
#endif

namespace detail {
/// The rows x cols 2-D view of the elements of `v`, a view of a rotating slot: under
/// FERRY_CHECKED_VIEWS it carries `v`'s slot generation; otherwise it is staged_view<T>(v.data(),
/// rows, cols), at no cost.
struct rows_stamper {
  template <class T>
  static staged_view<T> rows(device_span<T> v, std::size_t rows, std::size_t cols) {
#if FERRY_CHECKED_VIEWS
    const auto [gen, seen] = view_stamper::generation_of(v);
#if FERRY_HAS_MDSPAN
    checked_accessor<T> a;
    a.gen_ = gen;
    a.seen_ = seen;
    using mapping = typename staged_view<T>::mapping_type;
    return staged_view<T>(v.data(), mapping(typename staged_view<T>::extents_type(rows, cols)), a);
#else
    staged_view<T> m(v.data(), rows, cols);
    m.gen_ = gen;
    m.seen_ = seen;
    return m;
#endif
#else
    return staged_view<T>(v.data(), rows, cols);
#endif
  }
};
template <class T>
staged_view<T> rows_view(device_span<T> v, std::size_t rows, std::size_t cols) {
  return rows_stamper::rows(v, rows, cols);
}
}  // namespace detail

}  // namespace ferry
