// ferry/staged/detail/apply_kernel.cuh: the CUDA apply kernel of staged writes and its launcher.
//
// One thread block per chunk of the chunk table (write/chunk.hpp): a write of many
// elements is spread over many blocks, so that even one large write keeps enough reads in flight
// over PCIe when its contents are read in place through UVA (a block per write cannot keep enough
// in flight: docs/design.md, "Tuning constants"). Block b:
//   1. lanes 0-2 of warp 0 read chunk b's 24 bytes (through UVA: one PCIe round trip), into
//      shared memory;
//   2. the block runs it with the write plan's kernel body (write/kernel.cuh): 16-byte vectors
//      when source and destination are congruent mod 16 bytes (staging arranges this for every
//      write of 64 bytes or more), else scalar copies.
// The chunk table holds disjoint destinations (overlaps are resolved on the host before launch,
// later write wins), so blocks never race. Its last act stores the reuse core's mark (the slot is
// then free to rewrite; no event recorded or queried).
#pragma once

#if defined(__CUDACC__)

#include <ferry/backend/detail/cuda_runtime.hpp>
#include <ferry/backend/detail/kernel_mark.cuh>
#include <ferry/backend/detail/mapping_probe.cuh>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/staged/detail/layout.hpp>
#include <ferry/write/kernel.cuh>

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ferry {
inline namespace FERRY_KERNEL_NAMESPACE {
namespace staged_kernels {

/// The apply kernel: block b applies chunk b of `descs` (read through UVA), then every thread
/// finishes the reuse core's mark `m`.
template <class U>
FERRY_KERNEL_VISIBILITY __global__ void __launch_bounds__(detail::write_block_threads)
    apply_chunks(const detail::chunk_desc* descs, std::uintptr_t dst_base, std::uintptr_t src_base,
                 const detail::kernel_mark m) {
  __shared__ unsigned long long desc[3];
  // Plain loads: the launch orders them after the host's writes, and __ldcv of mapped memory is
  // slow (docs/design.md, "What the core's calls cost"), as in the step kernel.
  if (threadIdx.x < 3)
    desc[threadIdx.x] = reinterpret_cast<const unsigned long long*>(descs + blockIdx.x)[threadIdx.x];
  __syncthreads();
  write_kernels::run_chunk<U>(desc, dst_base, src_base);
  detail::finish_kernel_mark(m);
}

/// The inline apply kernel (one block): the chunk table and contents are the kernel's own
/// parameters (__grid_constant__: addressed in the constant bank, never copied per thread); one
/// warp per chunk. No PCIe read at all.
template <class U, std::size_t Bytes>
FERRY_KERNEL_VISIBILITY __global__ void __launch_bounds__(detail::write_block_threads)
    apply_inline(const __grid_constant__ detail::inline_apply_params<Bytes> p) {
  const auto* d = reinterpret_cast<const detail::chunk_desc*>(p.data);
  const U* src = reinterpret_cast<const U*>(p.data + p.content_offset);
  U* dst = reinterpret_cast<U*>(p.dst_base);
  const unsigned lane = threadIdx.x % 32u;
  for (unsigned c = threadIdx.x / 32u; c < p.chunks; c += blockDim.x / 32u) {
    const std::uint64_t dd = d[c].dst;
    const std::uint64_t ss = d[c].src;
    const unsigned n = d[c].count;
    for (unsigned i = lane; i < n; i += 32u) dst[dd + i] = src[ss + i];
  }
}

}  // namespace staged_kernels
}  // namespace FERRY_KERNEL_NAMESPACE

// The host functions on the way to a launch are hidden too: were one of them interposed across
// shared objects built for different architectures, it would launch the other object's kernel.
namespace detail {

/// Loads the apply kernels of word type U into the current context once per process (the first
/// call; later calls cost nothing). With CUDA's lazy module loading (the default since CUDA 12.2)
/// a kernel's first launch loads its module, which may wait for the whole context: a first apply
/// enqueued while the stream is held (by a blocking host function, say) would then never return.
/// Owners call this at construction, outside any such window.
template <class U>
FERRY_KERNEL_VISIBILITY void preload_apply_kernels() {
  static const bool loaded = [] {
    cudaFuncAttributes a{};
    FERRY_CUDA_CHECK(cudaFuncGetAttributes(&a, staged_kernels::apply_chunks<U>));
    FERRY_CUDA_CHECK(cudaFuncGetAttributes(&a, staged_kernels::apply_inline<U, inline_apply_small_bytes>));
    FERRY_CUDA_CHECK(cudaFuncGetAttributes(&a, staged_kernels::apply_inline<U, inline_apply_max_bytes>));
    return true;
  }();
  (void)loaded;
}

/// Launches the apply kernel for `n` chunks (n > 0) of elements of `sizeof(U)` bytes on `s`; its
/// last act finishes `m`.
template <class U>
FERRY_KERNEL_VISIBILITY void launch_apply_chunks(const chunk_desc* descs, std::size_t n, std::uintptr_t dst_base,
                         std::uintptr_t src_base, const kernel_mark& m, cudaStream_t s) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw capacity_error("ferry: a staged-write apply of " + std::to_string(n) +
                         " chunks exceeds the grid limit of 2^31-1 blocks");
  launch_kernel("launch of ferry::staged_kernels::apply_chunks", staged_kernels::apply_chunks<U>,
                static_cast<unsigned>(n), write_block_threads, s, descs, dst_base, src_base, m);
}

template <class U, std::size_t Bytes>
FERRY_KERNEL_VISIBILITY void launch_apply_inline_as(const chunk_desc* descs, std::size_t n, const void* contents,
                            std::size_t content_bytes, std::uintptr_t dst_base, cudaStream_t s) {
  inline_apply_params<Bytes> p;  // only the bytes written below are read by the kernel
  const std::size_t table = n * sizeof(chunk_desc);
  p.dst_base = dst_base;
  p.chunks = static_cast<std::uint32_t>(n);
  p.content_offset = static_cast<std::uint32_t>(inline_apply_content_offset(n));
  std::memcpy(p.data, descs, table);
  std::memcpy(p.data + p.content_offset, contents, content_bytes);
  launch_kernel("launch of ferry::staged_kernels::apply_inline", staged_kernels::apply_inline<U, Bytes>, 1,
                write_block_threads, s, p);
}

/// Launches the inline apply when the chunk table and contents fit in the kernel's parameters
/// (inline_apply_max_bytes); returns false (nothing enqueued) otherwise. `descs` and `contents`
/// are host memory, copied into the launch before this returns.
template <class U>
FERRY_KERNEL_VISIBILITY bool launch_apply_inline_chunks(const chunk_desc* descs, std::size_t n, const void* contents,
                         std::size_t content_bytes, std::uintptr_t dst_base, cudaStream_t s) {
  const std::size_t need = inline_apply_data_bytes(n, content_bytes);
  if (n == 0) return false;
  if (need <= sizeof(inline_apply_params<inline_apply_small_bytes>::data)) {
    launch_apply_inline_as<U, inline_apply_small_bytes>(descs, n, contents, content_bytes, dst_base, s);
    return true;
  }
  if (need <= sizeof(inline_apply_params<inline_apply_max_bytes>::data)) {
    launch_apply_inline_as<U, inline_apply_max_bytes>(descs, n, contents, content_bytes, dst_base, s);
    return true;
  }
  return false;
}

/// The CUDA backend's applies: kernels (apply_ops in layout.hpp).
template <>
struct apply_ops<backend::cuda> {
  template <class U>
  FERRY_KERNEL_VISIBILITY static void preload() {
    preload_apply_kernels<U>();
  }
  template <class U>
  FERRY_KERNEL_VISIBILITY static void enqueue(stream_ref<backend::cuda> s, const chunk_desc* descs,
                                              std::size_t n, std::uintptr_t dst_base,
                                              std::uintptr_t src_base, const kernel_mark& m) {
    launch_apply_chunks<U>(descs, n, dst_base, src_base, m, s.get());
  }
  template <class U>
  FERRY_KERNEL_VISIBILITY static bool enqueue_inline(stream_ref<backend::cuda> s, const chunk_desc* descs,
                                                     std::size_t n, const void* contents,
                                                     std::size_t content_bytes, std::uintptr_t dst_base) {
    return launch_apply_inline_chunks<U>(descs, n, contents, content_bytes, dst_base, s.get());
  }
};

}  // namespace detail
}  // namespace ferry

#endif  // defined(__CUDACC__)
