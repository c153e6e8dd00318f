// Host values from Python for ferry_vllm's entry points: a list, tuple, range or other iterable of
// numbers, a NumPy array (or any buffer) of any numeric dtype, a CPU tensor of any numeric dtype,
// or one number, turned into elements of T by exact.hpp's rule — every entry point reads its
// values here. A value that does not convert exactly is ValueError, one that is not a number
// TypeError, each naming the value and its position; nothing is consumed then (the caller has
// not written anything yet: the values are converted before they are handed over).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ferry_vllm {

namespace py = pybind11;

/// The elements of a Python source as a contiguous span of T (int32, int64 or float32): read in
/// place where they already are elements of T, contiguous and aligned (a CPU tensor of T's dtype, a
/// NumPy array of it), else converted exactly into storage this object owns. Lives as long as
/// the span is read; neither copied nor moved.
template <class T>
class host_values {
 public:
  /// Reads `source` for `api` (named in errors). A source of no dimension (a number, a 0-d array
  /// or tensor) is TypeError: values are a sequence; a CUDA tensor is ValueError.
  host_values(py::handle source, const char* api);
  ~host_values();
  host_values(const host_values&) = delete;
  host_values& operator=(const host_values&) = delete;

  [[nodiscard]] std::span<const T> span() const noexcept { return span_; }
  [[nodiscard]] std::size_t size() const noexcept { return span_.size(); }

 private:
  void convert_sequence(py::handle source, const char* api);
  T* storage(std::size_t n);

  std::span<const T> span_;
  static constexpr std::size_t small = 64;
  T small_[small];
  std::vector<T> large_;
  at::Tensor tensor_;      // an in-place tensor, kept alive
  Py_buffer view_;         // an in-place buffer, held when has_view_, released by the destructor
  bool has_view_ = false;
};

/// One number (a Python int, bool or float, a NumPy scalar, a one-element CPU tensor) as T, by
/// the same rule.
template <class T>
T host_scalar(py::handle value, const char* api);

/// An integer argument (a Python int, or anything with __index__: a NumPy integer, a one-element
/// integer tensor) as int64; TypeError naming `what` for anything else, ValueError beyond int64.
std::int64_t int_argument(py::handle value, const char* api, const char* what);

}  // namespace ferry_vllm
