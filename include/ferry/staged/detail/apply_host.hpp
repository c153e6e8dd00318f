// ferry/staged/detail/apply_host.hpp: the host backend's apply "kernel": the chunk table applied
// by a host loop, enqueued in stream order (same semantics as the CUDA kernel: chunks are
// disjoint once overlaps are resolved, and in any case applied in staging order).
#pragma once

#include <ferry/backend/stream.hpp>
#include <ferry/staged/detail/layout.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry::detail {

/// Copies every chunk of `descs[0, n)`: `count` elements of `elem_size` bytes from
/// `src_base + src * elem_size` to `dst_base + dst * elem_size`. Runs on the stream's worker.
inline void apply_chunks_now(const chunk_desc* descs, std::size_t n, std::uintptr_t dst_base,
                             std::uintptr_t src_base, std::size_t elem_size) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const chunk_desc d = descs[i];
    std::memcpy(reinterpret_cast<void*>(dst_base + d.dst * elem_size),
                reinterpret_cast<const void*>(src_base + d.src * elem_size), d.count * elem_size);
  }
}

/// Enqueues the apply loop on a host stream. The chunk table and the contents must stay
/// unmodified until the stream has run it (the caller fences them).
inline void enqueue_apply_chunks(stream_ref<backend::host> s, const chunk_desc* descs,
                                 std::size_t n, std::uintptr_t dst_base, std::uintptr_t src_base,
                                 std::size_t elem_size) {
  enqueue_host(s, [=] { apply_chunks_now(descs, n, dst_base, src_base, elem_size); });
}

}  // namespace ferry::detail
