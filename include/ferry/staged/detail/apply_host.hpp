// ferry/staged/detail/apply_host.hpp: the host backend's apply "kernel": the chunk table applied
// by a host loop, enqueued in stream order (same semantics as the CUDA kernel: chunks are
// disjoint once overlaps are resolved, and in any case applied in staging order).
#pragma once

#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/staged/detail/layout.hpp>

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// The host backend's applies: one host task each (the reuse core marks the stream after it, so
/// the kernel_mark is empty), and no inline path (the task reads the slot itself).
template <>
struct apply_ops<backend::host> {
  template <class U>
  static void preload() noexcept {}
  /// The chunk table and the contents must stay unmodified until the stream has run the task.
  template <class U>
  static void enqueue(stream_ref<backend::host> s, const chunk_desc* descs, std::size_t n,
                      std::uintptr_t dst_base, std::uintptr_t src_base, const kernel_mark&) {
    enqueue_host(s, [=] { run_chunks_now(descs, n, dst_base, src_base, sizeof(U)); });
  }
  template <class U>
  static bool enqueue_inline(stream_ref<backend::host>, const chunk_desc*, std::size_t, const void*,
                             std::size_t, std::uintptr_t) noexcept {
    return false;
  }
};

}  // namespace ferry::detail
