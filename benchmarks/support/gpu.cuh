// Benchmark support for the CUDA backend: device time of operations queued behind a kernel that
// holds the stream (so the device, not the host, sets the pace), timed with CUDA events.
#pragma once

#include "bench.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ferry_bench {

#define BENCH_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess)                                                                 \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_));        \
  } while (0)

__global__ void hold_kernel(unsigned long long ns) {
  const unsigned long long t0 = clock64();
  // clock64 counts SM cycles; ~1.98 GHz on the H200 under load. Spin at least ns nanoseconds.
  while (clock64() - t0 < ns * 2) {
  }
}

/// Enqueues a kernel that keeps the stream busy for about `ms` milliseconds.
inline void hold_stream(cudaStream_t s, double ms) {
  hold_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long>(ms * 1e6));
  BENCH_CUDA(cudaPeekAtLastError());
}

/// Device microseconds per operation: the stream is held by a kernel long enough for the host
/// to enqueue `burst` operations; events bracket the operations only. Median of `reps` runs.
template <class Op>
double device_us(cudaStream_t s, int burst, Op&& op, int reps = 5, double hold_ms = 20) {
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<double> v;
  std::size_t i = 0;
  for (int r = 0; r < reps + 1; ++r) {
    hold_stream(s, hold_ms);
    BENCH_CUDA(cudaEventRecord(e0, s));
    for (int k = 0; k < burst; ++k) op(i++);
    BENCH_CUDA(cudaEventRecord(e1, s));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0) v.push_back(ms * 1e3 / burst);  // the first run is a warm-up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(v);
}

/// The GPU's name, for the results' "machine" field.
inline std::string gpu_name() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "no GPU";
  return p.name;
}

}  // namespace ferry_bench
