// ferry/backend/devices.hpp: whether this process can use the CUDA backend, for choosing the
// backend at start-up.
#pragma once

#include <ferry/backend/detail/cuda_runtime.hpp>
#include <ferry/config.hpp>

namespace ferry {

/// True when this build has the CUDA backend (FERRY_HAS_CUDA) and the process sees at least one
/// usable CUDA device (cudaGetDeviceCount succeeds with a count above 0); false on a host-backend
/// build, without a GPU, or without a driver (cudaErrorNoDevice, cudaErrorInsufficientDriver: the
/// error is consumed, so no later error check reports it). Never throws. Asked once per process:
/// later calls return the first answer.
///
/// The start-up pattern (docs/consuming.md, "Choosing the backend at run time"): write the engine
/// as a template over the backend, instantiate it for both, and pick one once:
///
///     template <class B> int run() { ferry::stream<B> s; ... }
///     int main() {
///       return ferry::cuda_device_available() ? run<ferry::backend::cuda>()
///                                             : run<ferry::backend::host>();
///     }
///
/// (run<ferry::backend::cuda> exists only where FERRY_HAS_CUDA is 1; with kernels launched by
/// ferry, in translation units built by nvcc.)
[[nodiscard]] inline bool cuda_device_available() noexcept {
#if FERRY_HAS_CUDA
  static const bool available = [] {
    int n = 0;
    const cudaError_t r = cudaGetDeviceCount(&n);
    if (r != cudaSuccess) {
      detail::consume_error(r);
      return false;
    }
    return n > 0;
  }();
  return available;
#else
  return false;
#endif
}

}  // namespace ferry
