// ferry/interop/dlpack.hpp: ferry spans from DLPack tensors (checked), and non-owning DLPack
// tensors over ferry spans. Needs <dlpack/dlpack.h> (Debian: libdlpack-dev); not included by the
// umbrella headers.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/interop/detail/tensor_check.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/policies/backend.hpp>

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

static_assert(ferry::detail::dl_device::cpu == kDLCPU && ferry::detail::dl_device::cuda == kDLCUDA &&
                  ferry::detail::dl_device::cuda_host == kDLCUDAHost,
              "ferry: the DLDeviceType values in backend/detail/memory_kind.hpp differ from dlpack.h's");

namespace ferry {

namespace detail::dl {
inline tensor describe(const DLTensor& t, const char* api) {
  // The device type as the integer the producer stored: a value outside DLDeviceType's
  // enumerators is refused by the checker, never loaded as the enum (undefined behaviour).
  std::underlying_type_t<DLDeviceType> device_type;
  static_assert(sizeof(device_type) == sizeof(t.device.device_type));
  std::memcpy(&device_type, &t.device.device_type, sizeof(device_type));
  return {api,
          t.data,
          t.byte_offset,
          {t.dtype.code, t.dtype.bits, t.dtype.lanes},
          {},
          static_cast<int>(device_type),
          t.device.device_id,
          t.ndim,
          t.shape,
          t.strides};
}

struct exporter;
}  // namespace detail::dl

/// The elements of the DLPack tensor `t` as a device_span<T> that kernels of backend B (on
/// `device`) can read and write. Accepted memory: CUDA backend, kDLCUDA on `device`, or
/// kDLCUDAHost (pinned; kernels reach it through UVA, on any device); host backend, kDLCPU with
/// device id 0. The tensor must be row-major contiguous (strides null or compact; extent-1
/// dimensions may carry any stride), of T's dtype (code, bits, lanes 1), with data + byte_offset
/// aligned for T, and neither data + byte_offset nor the end of the elements may wrap round the
/// address space; it is viewed flat, byte_offset applied. Any mismatch throws
/// std::invalid_argument naming it, expected vs got. The span does not own the memory: the
/// tensor's producer keeps it alive.
template <class T, class B = default_backend>
[[nodiscard]] device_span<T> from_dlpack(const DLTensor& t, int device) {
  const auto v =
      detail::dl::check<T>(detail::dl::describe(t, "from_dlpack"), detail::dl::device_memory<B>(device));
  return {v.data, v.size};
}

/// from_dlpack(t, device) on the device current now (the host backend's only device, 0).
template <class T, class B = default_backend>
[[nodiscard]] device_span<T> from_dlpack(const DLTensor& t) {
  return from_dlpack<T, B>(t, detail::backend_ops<B>::current_device());
}

/// The elements of the DLPack tensor `t` as a pinned_span<T>, with from_dlpack's checks. Accepted
/// memory: CUDA backend, kDLCUDAHost only (kDLCPU memory is not known to be pinned: wrap memory
/// you pinned yourself with ferry::assume_pinned); host backend, kDLCPU with device id 0.
template <class T, class B = default_backend>
[[nodiscard]] pinned_span<T> from_dlpack_pinned(const DLTensor& t) {
  const auto v =
      detail::dl::check<T>(detail::dl::describe(t, "from_dlpack_pinned"), detail::dl::pinned_memory<B>());
  return detail::make_pinned_span(v.data, v.size);
}

/// The elements of the DLPack tensor `t` as a host std::span<T> (kDLCPU with device id 0, or
/// kDLCUDAHost), with from_dlpack's checks: e.g. a pageable source for ferry::async_h2d.
template <class T>
[[nodiscard]] std::span<T> from_dlpack_host(const DLTensor& t) {
  const auto v = detail::dl::check<T>(detail::dl::describe(t, "from_dlpack_host"), detail::dl::host_memory());
  return {v.data, v.size};
}

/// A DLPack tensor viewing memory that ferry does not own through it: it owns only its shape and
/// strides, which `get()` points at. Move-only; `get()` and the DLTensor's shape and strides stay
/// at the same addresses for the object's lifetime (moves included: the moved-to object has them,
/// and the moved-from one is empty). The viewed memory must outlive every use of the DLTensor, and
/// this object must outlive every use of its shape and strides: a consumer that keeps the tensor
/// longer copies them.
class dlpack_tensor {
 public:
  /// The DLTensor (byte_offset 0, strides compact row-major, never null). ferry::error on an
  /// empty (moved-from) object.
  [[nodiscard]] const DLTensor& get() const {
    if (!state_) [[unlikely]]
      throw error("ferry: dlpack_tensor::get: the object is empty (moved from); its tensor went with the move");
    return state_->tensor;
  }
  /// True for an empty (moved-from) object, whose get() throws.
  [[nodiscard]] bool empty() const noexcept { return state_ == nullptr; }

 private:
  struct state {
    DLTensor tensor;
    std::vector<std::int64_t> dims;  // shape, then strides
  };
  template <class T>
  dlpack_tensor(T* data, std::size_t size, DLDevice device, std::span<const std::int64_t> shape)
      : state_(std::make_unique<state>()) {
    static_assert((detail::check_element<T>(), true));
    // DLPack's shapes and strides are int64_t: a span beyond INT64_MAX elements has none.
    constexpr auto most = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
    if (size > most)
      throw std::invalid_argument("ferry: to_dlpack: a span of " + std::to_string(size) +
                                  " elements has no DLPack shape: shapes and strides are int64_t "
                                  "(at most " + std::to_string(most) + " elements)");
    const std::int64_t flat = static_cast<std::int64_t>(size);
    if (shape.empty()) shape = {&flat, 1};
    const auto ndim = shape.size();
    std::size_t count = 1;
    for (auto e : shape) {
      if (e < 0 || !detail::mul_fits(count, static_cast<std::size_t>(e), count))
        throw std::invalid_argument("ferry: to_dlpack: shape " +
                                    detail::dl::dims(shape.data(), static_cast<int>(ndim)) +
                                    " has a negative or overflowing extent");
    }
    if (count != size)
      throw std::invalid_argument("ferry: to_dlpack: shape mismatch: expected " + std::to_string(size) +
                                  " elements (the span's size), got shape " +
                                  detail::dl::dims(shape.data(), static_cast<int>(ndim)) + " of " +
                                  std::to_string(count));
    auto& dims = state_->dims;
    dims.assign(shape.begin(), shape.end());
    dims.resize(2 * ndim);
    // Compact row-major strides: each is the product of the extents after it, at most the element
    // count (<= INT64_MAX) unless a zero extent makes the count 0 while the extents after it still
    // overflow; such a shape is rejected.
    std::int64_t stride = 1;
    for (std::size_t i = ndim; i-- > 0;) {
      dims[ndim + i] = stride;
      if (i > 0 && __builtin_mul_overflow(stride, dims[i], &stride))
        throw std::invalid_argument("ferry: to_dlpack: the strides of shape " +
                                    detail::dl::dims(shape.data(), static_cast<int>(ndim)) +
                                    " overflow int64_t");
    }
    constexpr auto type = detail::dl::dtype_of<T>();
    state_->tensor = DLTensor{const_cast<std::remove_cv_t<T>*>(data),
                              device,
                              static_cast<int>(ndim),
                              DLDataType{type.code, type.bits, type.lanes},
                              dims.data(),
                              dims.data() + ndim,
                              0};
  }
  friend struct detail::dl::exporter;

  std::unique_ptr<state> state_;
};

namespace detail::dl {
struct exporter {
  template <class T>
  static dlpack_tensor make(T* data, std::size_t size, DLDevice device, std::span<const std::int64_t> shape) {
    return dlpack_tensor(data, size, device, shape);
  }
};
}  // namespace detail::dl

/// A DLPack tensor over `s` on `device`: kDLCUDA (CUDA backend) or kDLCPU with id 0 (host
/// backend). `shape` (row-major; empty means {s.size()}) must hold exactly s.size() elements, else
/// std::invalid_argument; so must a span of more than INT64_MAX elements, or a shape whose strides
/// overflow int64_t (DLPack's shapes and strides are int64_t). A span of const T is exported too:
/// the consumer must not write.
template <class B = default_backend, class T>
[[nodiscard]] dlpack_tensor to_dlpack(device_span<T> s, int device, std::span<const std::int64_t> shape = {}) {
  using kind = detail::memory_kind<B>;
  if (kind::one_device && device != 0)
    throw std::invalid_argument(
        "ferry: to_dlpack: device id mismatch: expected 0 (the host backend's only device), got " +
        std::to_string(device));
  const DLDevice where{static_cast<DLDeviceType>(kind::device), device};
  return detail::dl::exporter::make(s.data(), s.size(), where, shape);
}

/// to_dlpack(s, device, shape) on the device current now.
template <class B = default_backend, class T>
[[nodiscard]] dlpack_tensor to_dlpack(device_span<T> s, std::span<const std::int64_t> shape = {}) {
  return to_dlpack<B>(s, detail::backend_ops<B>::current_device(), shape);
}

/// A DLPack tensor over the pinned span `s`: kDLCUDAHost with id 0 (CUDA backend) or kDLCPU with
/// id 0 (host backend); `shape` as for device spans.
template <class B = default_backend, class T>
[[nodiscard]] dlpack_tensor to_dlpack(pinned_span<T> s, std::span<const std::int64_t> shape = {}) {
  const DLDevice where{static_cast<DLDeviceType>(detail::memory_kind<B>::pinned), 0};
  return detail::dl::exporter::make(s.data(), s.size(), where, shape);
}

}  // namespace ferry
