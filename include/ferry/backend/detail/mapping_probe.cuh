// ferry/backend/detail/mapping_probe.cuh: the CUDA side of the mapping probe (mapping.hpp): its
// kernel, the probe that runs it, and the offer of that probe to the whole process (every
// component, host-compiled ones included, asks mapping_verdicts).
#pragma once

#if defined(__CUDACC__)

#include <ferry/backend/detail/cuda_runtime.hpp>
#include <ferry/backend/detail/mapping.hpp>
#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {
inline namespace FERRY_KERNEL_NAMESPACE {
namespace backend_kernels {

/// The mapping probe's kernel: reads `n` words through the mapped address `src` and writes each
/// back through the mapped address `dst` (volatile: every access goes through the mapping).
template <class Word>
FERRY_KERNEL_VISIBILITY __global__ void probe_mapping(const volatile Word* src, volatile Word* dst, unsigned n) {
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  __threadfence_system();
}

}  // namespace backend_kernels
}  // namespace FERRY_KERNEL_NAMESPACE

namespace detail {

/// The probe's pinned memory (the pattern, then what came back) and private stream on one device:
/// made at the device's first probe and kept, as the reuse core's counters are (freeing pinned
/// memory waits for the whole device, which work held elsewhere may keep busy).
struct mapping_probe_memory {
  std::uint64_t* host = nullptr;
  std::uint64_t* device = nullptr;  // the same memory, as cudaHostGetDevicePointer maps it
  cudaStream_t stream = nullptr;
};

/// The CUDA probe (mapping.hpp): on `device`, writes the pattern into pinned, mapped memory, has
/// probe_mapping read it and write it back through the device pointer on a private stream, waits
/// for that within the wait bound (polling the stream: ferry::timeout_error past it), and
/// compares. Called under mapping_verdicts' lock, once per device. Neither counted in
/// backend_stats_of nor seen by sync_guard as a wait of ferry's (it runs once, at a construction);
/// sync_guard sees its cudaHostAlloc.
template <class Word = std::uint64_t>
FERRY_KERNEL_VISIBILITY mapping_finding probe_cuda_mapping(int device) {
  static_assert(sizeof(Word) == sizeof(std::uint64_t), "ferry: the mapping pattern is of 64-bit words");
  constexpr std::size_t words = mapping_probe_words;
  static mapping_probe_memory per_device[timeline_max_devices];
  const device_scope on_device(device);
  mapping_probe_memory& m = per_device[device];
  if (m.host == nullptr) {
    void* host = nullptr;
    FERRY_CUDA_CHECK_ALLOC(cudaHostAlloc(&host, 2 * words * sizeof(Word), cudaHostAllocMapped | cudaHostAllocPortable),
                           "pinned", 2 * words * sizeof(Word));
    void* dev = nullptr;
    cudaStream_t s = nullptr;
    cudaError_t r = cudaHostGetDevicePointer(&dev, host, 0);
    if (r == cudaSuccess) r = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (r != cudaSuccess) {
      static_cast<void>(cudaFreeHost(host));  // nothing was enqueued on it
      throw_cuda(r, "the mapping probe's cudaHostGetDevicePointer or cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
    m = {static_cast<std::uint64_t*>(host), static_cast<std::uint64_t*>(dev), s};
  }
  for (std::size_t i = 0; i < words; ++i) {
    m.host[i] = mapping_pattern(i);
    m.host[words + i] = 0;
  }
  launch_kernel("launch of ferry::backend_kernels::probe_mapping", backend_kernels::probe_mapping<Word>, 1,
                static_cast<unsigned>(words), m.stream, reinterpret_cast<const volatile Word*>(m.device),
                reinterpret_cast<volatile Word*>(m.device + words), static_cast<unsigned>(words));
  wait_deadline d;
  cudaError_t r = cudaErrorNotReady;
  if (!poll_until(d, [&] { return (r = cudaStreamQuery(m.stream)) != cudaErrorNotReady; }))
    throw timeout_error("ferry: the mapping probe's wait for its kernel on device " + std::to_string(device) + " " +
                        timeout_text(d));
  check_cuda(r, "the mapping probe's kernel", __FILE__, __LINE__);
  std::uint64_t back[words];
  for (std::size_t i = 0; i < words; ++i) back[i] = static_cast<const volatile std::uint64_t*>(m.host)[words + i];
  return mapping_compare(back, words);
}

/// Every translation unit built by nvcc that includes <ferry/ferry.cuh> offers the probe when the
/// program starts (the first offer is kept): a component constructed anywhere in the process, a
/// host-compiled file included, then proves its device's mapping before kernels read through it.
inline const bool cuda_mapping_probe_offered =
    (mapping_verdicts<backend::cuda>::instance().offer(&probe_cuda_mapping<>), true);

}  // namespace detail
}  // namespace ferry

#endif  // defined(__CUDACC__)
