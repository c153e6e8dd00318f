// ferry/write/kernel.cuh: the one kernel body of the write plan: how a thread block
// runs one descriptor (write/chunk.hpp's chunk_desc), a copy or a fill, for the staged-write apply
// kernel (apply_kernel.cuh, words of the element type) and the step kernel (step/detail/
// step_kernel.cuh, bytes at absolute addresses) alike.
//
// A copy whose source and destination are congruent mod 16 bytes (placement arranges this for the
// writes that matter) runs a scalar head up to 16-byte alignment, a body of 16-byte vector loads
// and stores (each thread issues all its loads before its stores: write_vector_loads_in_flight
// per thread, a whole chunk in one round), and a scalar tail; otherwise scalar copies, also loads
// before stores (write_scalar_loads_in_flight per thread). The constants: detail/tuning.hpp.
#pragma once

#if defined(__CUDACC__)

#include <ferry/config.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/write/chunk.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ferry {
inline namespace FERRY_KERNEL_NAMESPACE {
namespace write_kernels {

/// Copies `n` values V from `src` to `dst`, thread `tid` of `nt` taking every nt-th one, in
/// rounds where each thread issues its K loads before its K stores.
template <unsigned K, class V>
__device__ __forceinline__ void copy_loads_first(V* __restrict__ dst, const V* __restrict__ src,
                                                 unsigned n, unsigned tid, unsigned nt) {
  for (unsigned base = 0; base < n; base += nt * K) {
    V r[K];
#pragma unroll
    for (unsigned k = 0; k < K; ++k) {
      const unsigned i = base + k * nt + tid;
      if (i < n) r[k] = src[i];
    }
#pragma unroll
    for (unsigned k = 0; k < K; ++k) {
      const unsigned i = base + k * nt + tid;
      if (i < n) dst[i] = r[k];
    }
  }
}

/// Copies `n` words from `src` to `dst` with the whole block.
template <class U>
__device__ __forceinline__ void copy_chunk(U* __restrict__ dst, const U* __restrict__ src,
                                           unsigned n) {
  constexpr unsigned per_vec = static_cast<unsigned>(detail::write_vector_bytes / sizeof(U));
  const unsigned tid = threadIdx.x;
  const unsigned nt = blockDim.x;
  const auto da = reinterpret_cast<std::uintptr_t>(dst);
  const auto sa = reinterpret_cast<std::uintptr_t>(src);
  unsigned head = n;
  unsigned nvec = 0;
  if (((da ^ sa) & (detail::write_vector_bytes - 1)) == 0) {
    const unsigned mis = static_cast<unsigned>(
        ((detail::write_vector_bytes - (da & (detail::write_vector_bytes - 1))) &
         (detail::write_vector_bytes - 1)) / sizeof(U));
    head = mis < n ? mis : n;
    nvec = (n - head) / per_vec;
  }
  if (nvec == 0) {
    copy_loads_first<detail::write_scalar_loads_in_flight>(dst, src, n, tid, nt);  // scalar
    return;
  }
  if (tid < head) dst[tid] = src[tid];
  copy_loads_first<detail::write_vector_loads_in_flight>(reinterpret_cast<uint4*>(dst + head),
                                                          reinterpret_cast<const uint4*>(src + head),
                                                          nvec, tid, nt);
  for (unsigned i = head + nvec * per_vec + tid; i < n; i += nt) dst[i] = src[i];
}

/// Writes the `sizeof(W)`-byte value at `src` over `bytes` bytes at `dst` with the whole block.
template <class W>
__device__ __forceinline__ void fill_chunk(unsigned char* dst, const unsigned char* src, unsigned bytes) {
  const W v = *reinterpret_cast<const W*>(src);
  W* d = reinterpret_cast<W*>(dst);
  for (unsigned i = threadIdx.x; i < bytes / sizeof(W); i += blockDim.x) d[i] = v;
}

/// Runs the descriptor whose three words are `desc` (in shared memory) with the whole block, on
/// words U at `dst_base + dst * sizeof(U)` from `src_base + src * sizeof(U)`. Integer arithmetic:
/// zero bases make the indices absolute (the fused writer's elements, a step's bytes).
template <class U>
__device__ __forceinline__ void run_chunk(const unsigned long long* desc, std::uintptr_t dst_base,
                                          std::uintptr_t src_base) {
  U* dst = reinterpret_cast<U*>(dst_base + desc[0] * sizeof(U));
  const U* src = reinterpret_cast<const U*>(src_base + desc[1] * sizeof(U));
  const auto count = static_cast<unsigned>(desc[2] & 0xffffffffu);
  const auto fill = static_cast<unsigned>(desc[2] >> 32);
  if (fill == 0) {
    copy_chunk<U>(dst, src, count);
    return;
  }
  auto* d = reinterpret_cast<unsigned char*>(dst);
  const auto* s = reinterpret_cast<const unsigned char*>(src);
  const unsigned bytes = count * static_cast<unsigned>(sizeof(U));
  switch (fill) {
    case 1: fill_chunk<unsigned char>(d, s, bytes); break;
    case 2: fill_chunk<unsigned short>(d, s, bytes); break;
    case 4: fill_chunk<unsigned>(d, s, bytes); break;
    default: fill_chunk<unsigned long long>(d, s, bytes); break;
  }
}

}  // namespace write_kernels
}  // namespace FERRY_KERNEL_NAMESPACE
}  // namespace ferry

#endif  // defined(__CUDACC__)
