// ferry/memory/staged_view.hpp: the 2-D view of device-accessible rows (a staged-write target, a
// uva_pool's rows) that device code indexes.
#pragma once

#include <ferry/config.hpp>

#include <cstddef>

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
  /// Element [r][c] (device code on the CUDA backend; host code on the host backend).
  [[nodiscard]] FERRY_HOST_DEVICE constexpr T& operator()(std::size_t r, std::size_t c) const noexcept {
    return data_[r * cols_ + c];
  }

 private:
  T* data_ = nullptr;
  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
};

#if FERRY_HAS_MDSPAN
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

}  // namespace ferry
