// ferry/interop/torch.hpp: ferry spans over PyTorch tensors (checked as DLPack tensors are), and
// ferry stream references from PyTorch's CUDA streams. Needs the torch headers (a PyTorch C++
// extension or a libtorch build); never included by the umbrella headers.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/interop/detail/tensor_check.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/policies/backend.hpp>

#include <ATen/core/Tensor.h>
#if FERRY_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace ferry {

namespace detail::dl {

inline dtype torch_dtype(c10::ScalarType t) {
  using S = c10::ScalarType;
  switch (t) {
    case S::Char: return {int_code, 8, 1};
    case S::Short: return {int_code, 16, 1};
    case S::Int: return {int_code, 32, 1};
    case S::Long: return {int_code, 64, 1};
    case S::Byte: return {uint_code, 8, 1};
    case S::UInt16: return {uint_code, 16, 1};
    case S::UInt32: return {uint_code, 32, 1};
    case S::UInt64: return {uint_code, 64, 1};
    case S::Half: return {float_code, 16, 1};
    case S::Float: return {float_code, 32, 1};
    case S::Double: return {float_code, 64, 1};
    case S::BFloat16: return {bfloat_code, 16, 1};
    default: return {0xff, 0, 1};  // no ferry element type has it (bool, complex, float8, ...)
  }
}

// The tensor as the checker sees it: DLPack's device types as torch would export them (a pinned
// CPU tensor is kDLCUDAHost for the CUDA backend; every CPU tensor is kDLCPU for the host one).
template <class B>
tensor describe(const at::Tensor& t, const char* api) {
  if (!t.defined()) throw std::invalid_argument(std::string("ferry: ") + api + ": the tensor is undefined");
  const auto type = torch_dtype(t.scalar_type());
  int device_type = -1;
  int device_id = 0;
  if (t.is_cuda()) {
    device_type = cuda;
    device_id = t.get_device();
  } else if (t.is_cpu()) {
    device_type = t.is_pinned() ? memory_kind<B>::pinned : cpu;
  } else {
    throw std::invalid_argument(std::string("ferry: ") + api +
                                ": device type mismatch: expected a CUDA or CPU tensor, got " +
                                t.device().str());
  }
  return {api,
          t.data_ptr(),
          0,
          type,
          type.code == 0xff ? std::string_view(c10::toString(t.scalar_type())) : std::string_view(),
          device_type,
          device_id,
          static_cast<int>(t.dim()),
          t.sizes().data(),
          t.strides().data()};
}

}  // namespace detail::dl

/// The elements of the torch tensor `t` as a device_span<T> that kernels of backend B (on
/// `device`) can read and write, with from_dlpack's checks: a CUDA tensor on `device` or a pinned
/// CPU tensor (through UVA) for the CUDA backend, a CPU tensor for the host backend; T's dtype
/// (torch.int32 for std::int32_t, torch.bfloat16 for __nv_bfloat16, ...); contiguous
/// (t.is_contiguous()); viewed flat from t.data_ptr(). A mismatch throws std::invalid_argument
/// naming it. The span does not own the memory: keep the tensor (its storage) alive, and order
/// ferry's stream after torch's work on it (ferry::from_torch(stream)).
template <class T, class B = default_backend>
[[nodiscard]] device_span<T> from_torch(const at::Tensor& t, int device) {
  const auto v =
      detail::dl::check<T>(detail::dl::describe<B>(t, "from_torch"), detail::dl::device_memory<B>(device));
  return {v.data, v.size};
}

/// from_torch(t, device) on the device current now.
template <class T, class B = default_backend>
[[nodiscard]] device_span<T> from_torch(const at::Tensor& t) {
  return from_torch<T, B>(t, detail::backend_ops<B>::current_device());
}

/// The elements of the pinned CPU tensor `t` (t.is_pinned(); any CPU tensor on the host backend)
/// as a pinned_span<T>, with from_torch's checks.
template <class T, class B = default_backend>
[[nodiscard]] pinned_span<T> from_torch_pinned(const at::Tensor& t) {
  const auto v =
      detail::dl::check<T>(detail::dl::describe<B>(t, "from_torch_pinned"), detail::dl::pinned_memory<B>());
  return detail::make_pinned_span(v.data, v.size);
}

/// The elements of the CPU tensor `t` (pinned or not) as a host std::span<T>, with from_torch's
/// checks: e.g. a pageable source for ferry::async_h2d.
template <class T>
[[nodiscard]] std::span<T> from_torch_host(const at::Tensor& t) {
  const auto v = detail::dl::check<T>(detail::dl::describe<backend::host>(t, "from_torch_host"),
                                      detail::dl::host_memory());
  return {v.data, v.size};
}

#if FERRY_HAS_CUDA
/// The CUDA stream of a torch stream (e.g. c10::cuda::getCurrentCUDAStream()), for ferry calls
/// ordered with torch's work on it. Non-owning: torch's stream pool keeps the stream. Torch's
/// default stream is the null handle, which ferry reads as an empty (moved-from) stream: it is
/// named by its explicit handle, cudaStreamLegacy, instead.
[[nodiscard]] inline stream_ref<backend::cuda> from_torch(const c10::cuda::CUDAStream& s) {
  const cudaStream_t handle = s.stream();
  return stream_ref<backend::cuda>(handle != nullptr ? handle : cudaStreamLegacy);
}
#endif

}  // namespace ferry
