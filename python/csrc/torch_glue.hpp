// What every object of ferry_vllm._C needs to stand on torch: the backend of a device type and
// its stream, element types from torch dtypes, arguments read from Python, tensors over ferry's
// memory. Shared by module.cpp (vLLM's utilities and StepBatch) and prep.cpp (VllmStepPrep).
#pragma once

#include "apply.hpp"
#include "values.hpp"

#include <ferry/interop/torch.hpp>

// torch/python.h and ATen/ATen.h, not torch/extension.h: the C++ frontend is not used, and
// leaving it out halves the compile time.
#include <ATen/ATen.h>
#include <torch/python.h>
#if FERRY_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry_vllm {

inline constexpr bool cuda_build = FERRY_HAS_CUDA != 0;

// ---- backends -------------------------------------------------------------------------------------
// What an object of backend B runs on. Host: one ferry host stream, drained after every call
// (torch's CPU tensors are read eagerly), CPU tensors. CUDA: torch's current stream of the current
// device, CUDA tensors of that device.
template <class B>
struct on;

template <>
struct on<host_backend> {
  static constexpr const char* name = "cpu";
  static stream_t<host_backend> stream() {
    static ferry::stream<host_backend> s;
    return s;
  }
  static void finish(stream_t<host_backend> s) { s.synchronize(); }
  static at::Device device() { return at::Device(at::kCPU); }
};

#if FERRY_HAS_CUDA
template <>
struct on<cuda_backend> {
  static constexpr const char* name = "cuda";
  static stream_t<cuda_backend> stream() { return ferry::from_torch(c10::cuda::getCurrentCUDAStream()); }
  static void finish(stream_t<cuda_backend>) {}
  static at::Device device() { return at::Device(at::kCUDA, c10::cuda::current_device()); }
};
#endif

template <class B>
inline constexpr bool is_host = std::is_same_v<B, host_backend>;

/// Calls f.template operator()<B>() for the backend of device type `cuda` (false: cpu).
template <class F>
decltype(auto) dispatch_backend(bool cuda, const char* api, F&& f) {
#if FERRY_HAS_CUDA
  if (cuda) return f.template operator()<cuda_backend>();
#else
  if (cuda)
    throw std::invalid_argument(std::string("ferry: ") + api +
                                ": device='cuda' needs ferry_vllm's CUDA build; this build holds ferry's host backend "
                                "only (device='cpu'): rebuild where nvcc is found (docs/python.md, Install)");
#endif
  return f.template operator()<host_backend>();
}

/// The elements of `t` as a device_span<T> of the memory backend B reaches (from_torch's checks).
template <class T, class B>
ferry::device_span<T> span_of(const at::Tensor& t) {
  return ferry::from_torch<T, B>(t, t.is_cpu() ? 0 : t.get_device());
}

// ---- dtypes ---------------------------------------------------------------------------------------
template <class T>
constexpr at::ScalarType scalar_of() {
  if constexpr (std::is_same_v<T, std::int32_t>) return at::kInt;
  else if constexpr (std::is_same_v<T, std::int64_t>) return at::kLong;
  else return at::kFloat;
}

// Calls f.template operator()<T>() for the element type of `dtype` (int32, int64, float32).
template <class F>
decltype(auto) dispatch(at::ScalarType dtype, const char* api, F&& f) {
  switch (dtype) {
    case at::kInt: return f.template operator()<std::int32_t>();
    case at::kLong: return f.template operator()<std::int64_t>();
    case at::kFloat: return f.template operator()<float>();
    default:
      throw std::invalid_argument(std::string("ferry: ") + api + ": unsupported dtype " + c10::toString(dtype) +
                                  ": should be one of [torch.int32, torch.int64, torch.float32]");
  }
}

inline std::size_t checked_index(std::int64_t v, const char* api, const char* what) {
  if (v < 0) throw std::out_of_range(std::string("ferry: ") + api + ": negative " + what + " " + std::to_string(v));
  return static_cast<std::size_t>(v);
}

inline std::size_t index_argument(py::handle v, const char* api, const char* what) {
  return checked_index(int_argument(v, api, what), api, what);
}

// A torch.Tensor argument, or a ferry TypeError naming it.
inline at::Tensor tensor_argument(py::handle v, const char* api, const char* what) {
  if (!THPVariable_Check(v.ptr()))
    throw py::type_error(std::string("ferry: ") + api + ": " + what + " must be a torch.Tensor, got " +
                         Py_TYPE(v.ptr())->tp_name);
  return THPVariable_Unpack(v.ptr());
}

// A tensor over ferry's memory at `data`, keeping `owner` alive for as long as torch holds it.
inline at::Tensor view_of(void* data, std::vector<std::int64_t> sizes, at::ScalarType dtype, at::Device device,
                   std::shared_ptr<void> owner) {
  // target_device: the device is known, so torch need not ask the driver for the pointer's.
  return at::for_blob(data, sizes)
      .deleter([owner = std::move(owner)](void*) mutable { owner.reset(); })
      .options(at::TensorOptions().dtype(dtype).device(device))
      .target_device(device)
      .make_tensor();
}

/// Registers VllmStepPrep's core (prep.cpp) in the module.
void register_prep(py::module_& m);

inline std::vector<std::int64_t> shape(std::int64_t rows, const std::vector<std::int64_t>& tail) {
  std::vector<std::int64_t> s{rows};
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

}  // namespace ferry_vllm
