// ferry/staged/detail/apply.hpp: one apply on either backend (through its apply_ops), stamped by
// the reuse core, and the staging policy's choice between reading contents in place (UVA) and
// copying them first (H2D).
#pragma once

#include <ferry/backend/detail/timeline.hpp>
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

/// Loads the apply kernels for T (see preload_apply_kernels); a no-op on the host backend and in
/// translation units not built by nvcc (they cannot apply on CUDA anyway).
template <class T, class B>
FERRY_KERNEL_VISIBILITY void preload_apply() {
  apply_ops<B>::template preload<word_t<T>>();
}

/// Enqueues the apply of `n` chunks of elements of T on `s` (CUDA: one kernel launch; host: one
/// host task) and returns the point after it: Marked, through the reuse core (where it can, the
/// kernel stores that point as its last act); otherwise an empty stamp. Work enqueued but not
/// stamped calls `abandon()` before the error is rethrown: what it reads must never be reused.
template <class T, bool Marked, class B, class Abandon>
FERRY_KERNEL_VISIBILITY stamp launch_apply(stream_ref<B> s, const chunk_desc* descs, std::size_t n,
                                           std::uintptr_t dst_base, std::uintptr_t src_base,
                                           Abandon&& abandon) {
  auto launch = [&](const kernel_mark& m) {
    apply_ops<B>::template enqueue<word_t<T>>(s, descs, n, dst_base, src_base, m);
  };
  if constexpr (!Marked) {
    launch(kernel_mark{});
    return {};
  } else {
    bool enqueued = false;
    try {
      return shared_timeline<B>().mark_with(s, [&](const kernel_mark& m) {
        launch(m);
        enqueued = true;
      });
    } catch (...) {
      if (enqueued) abandon();
      throw;
    }
  }
}

/// Small in-place applies on CUDA: when the chunk table and contents fit in the kernel's
/// parameters (layout.hpp, inline_apply_params), launches the inline kernel (the data are copied
/// into the launch; the slot is not read by the device, so it needs no mark) and returns true.
/// Otherwise, and on the host backend, enqueues nothing and returns false.
template <class T, class B>
FERRY_KERNEL_VISIBILITY bool launch_apply_inline(stream_ref<B> s, const chunk_desc* descs, std::size_t n,
                                                 const void* contents, std::size_t content_bytes,
                                                 std::uintptr_t dst_base) {
  return apply_ops<B>::template enqueue_inline<word_t<T>>(s, descs, n, contents, content_bytes, dst_base);
}

}  // namespace ferry::detail
