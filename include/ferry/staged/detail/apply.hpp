// ferry/staged/detail/apply.hpp: one launch of the apply "kernel" on either backend, and the
// staging policy's choice between reading contents in place (UVA) and copying them first (H2D).
#pragma once

#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/policies/staging.hpp>
#include <ferry/staged/detail/apply_host.hpp>
#include <ferry/staged/detail/layout.hpp>

#if defined(__CUDACC__)
#include <ferry/staged/detail/apply_kernel.cuh>
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ferry::detail {

/// Whether an apply of `content_bytes` bytes reads its contents in place through UVA (true) or
/// copies them into device scratch first (false), under staging policy S for a target of kind
/// `Target`.
template <staging_policy S, memory_kind Target>
constexpr bool staged_reads_in_place(std::size_t content_bytes) noexcept {
  return content_bytes <= S::in_place_max_bytes(Target);
}

/// Loads the CUDA apply kernels for T (see preload_apply_kernels); a no-op on the host backend
/// and in translation units not built by nvcc (they cannot apply on CUDA anyway).
template <class T, class B>
FERRY_KERNEL_VISIBILITY void preload_apply() {
#if defined(__CUDACC__)
  if constexpr (!std::is_same_v<B, backend::host>) preload_apply_kernels<word_t<T>>();
#endif
}

/// Enqueues the apply of `n` chunks of elements of T on `s` (chunk table and contents fenced by
/// the caller). CUDA: one kernel launch; host: one host task.
template <class T, class B>
FERRY_KERNEL_VISIBILITY void launch_apply(stream_ref<B> s, const chunk_desc* descs, std::size_t n, std::uintptr_t dst_base,
                  std::uintptr_t src_base) {
  if constexpr (std::is_same_v<B, backend::host>) {
    enqueue_apply_chunks(s, descs, n, dst_base, src_base, sizeof(T));
  } else {
#if defined(__CUDACC__)
    launch_apply_chunks<word_t<T>>(descs, n, dst_base, src_base, s.get());
#else
    static_assert(dependent_false<T, B>,
                  "ferry: staged_write_tensor::apply_write and fused_staged_writer::apply launch a "
                  "CUDA kernel: build this translation unit with nvcc and include <ferry/ferry.cuh>.");
#endif
  }
}

/// Small in-place applies on CUDA: when the chunk table and contents fit in the kernel's
/// parameters (layout.hpp, inline_apply_params), launches the inline kernel (the data are copied
/// into the launch; the slot is not read by the device) and returns true. Otherwise, and on the
/// host backend, enqueues nothing and returns false.
template <class T, class B>
FERRY_KERNEL_VISIBILITY bool launch_apply_inline(stream_ref<B> s, const chunk_desc* descs, std::size_t n,
                         const void* contents, std::size_t content_bytes, std::uintptr_t dst_base) {
  if constexpr (std::is_same_v<B, backend::host>) {
    (void)s, (void)descs, (void)n, (void)contents, (void)content_bytes, (void)dst_base;
    return false;
  } else {
#if defined(__CUDACC__)
    return launch_apply_inline_chunks<word_t<T>>(descs, n, contents, content_bytes, dst_base, s.get());
#else
    static_assert(dependent_false<T, B>,
                  "ferry: staged_write_tensor::apply_write launches a CUDA kernel: build this "
                  "translation unit with nvcc and include <ferry/ferry.cuh>.");
    (void)s, (void)descs, (void)n, (void)contents, (void)content_bytes, (void)dst_base;
    return false;
#endif
  }
}

}  // namespace ferry::detail
