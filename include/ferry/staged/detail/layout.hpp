// ferry/staged/detail/layout.hpp: a staged write's slot and what an apply hands to its kernel
// (the descriptor itself, chunk_desc, is the write plan's: write/chunk.hpp).
//
// A staging slot of staged writes is one pinned, mapped arena block:
//
//   [ chunk_desc[desc_capacity] | pad to 256 | contents (bytes) ]
//
// stage_write copies a write's elements straight into the contents area and appends one
// chunk_desc per `elements_per_chunk<T>` elements of it. The apply kernel runs one block per
// chunk: block b reads chunk b (one 24-byte read through UVA) and copies `count` elements from
// `src_base + src` to `dst_base + dst`. Offsets are element indices, 64-bit.
//
// Contents are placed so that a write's source address is congruent to its destination address
// modulo 16 bytes (at most 15 bytes of padding, only for writes of 64 bytes or more): the kernel
// then always copies their bodies with 16-byte vector loads and stores.
#pragma once

#include <ferry/config.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/detail/tuning.hpp>  // the write plan's constants: chunk bytes, block threads, vector width
#include <ferry/write/chunk.hpp>

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// The inline apply (CUDA, small applies that read contents in place): the chunk table and the
/// contents travel in the kernel's parameters (a __grid_constant__ block of `Bytes` bytes), so
/// the kernel reads nothing through PCIe and the staging slot is free again once the launch is
/// enqueued (no fence, no rotation). `data` holds chunk_desc[chunks], padding to 16 bytes, then
/// the contents (descriptors' src are element indices from `content_offset`).
template <std::size_t Bytes>
struct inline_apply_params {
  std::uint64_t dst_base;        // the target's address (dst are element indices from it)
  std::uint32_t chunks;
  std::uint32_t content_offset;  // bytes from data[0]
  alignas(16) unsigned char data[Bytes - 16];
};
// Its parameter-block sizes: inline_apply_small_bytes and inline_apply_max_bytes (tuning.hpp).
/// Where an inline apply's contents start in `data`: after `chunks` descriptors, padded to the
/// vector width (16 bytes).
constexpr std::size_t inline_apply_content_offset(std::size_t chunks) noexcept {
  return round_up(chunks * sizeof(chunk_desc), write_vector_bytes);
}
/// Bytes of `data` an inline apply of `chunks` chunks and `content_bytes` of contents needs.
constexpr std::size_t inline_apply_data_bytes(std::size_t chunks, std::size_t content_bytes) noexcept {
  return inline_apply_content_offset(chunks) + content_bytes;
}

/// How backend B enqueues an apply of a chunk table: `preload<U>()`, `enqueue<U>(stream, descs, n,
/// dst_base, src_base, kernel_mark)` and `enqueue_inline<U>(stream, descs, n, contents,
/// content_bytes, dst_base)` (false: nothing enqueued), for words U. Specialized per backend
/// (apply_host.hpp; apply_kernel.cuh, nvcc only); this primary template is what a translation unit
/// not built by nvcc gets for CUDA: neither a construction (which preloads the kernels) nor an
/// apply compiles.
template <class B>
struct apply_ops {
  template <class U>
  static void preload() noexcept {
    static_assert(dependent_false<U, B>,
                  "ferry: staged_write_tensor and fused_staged_writer load their CUDA apply kernels "
                  "when constructed (CUDA loads modules lazily, and a first apply behind a held "
                  "stream would never return): construct them in a translation unit built with nvcc "
                  "that includes <ferry/ferry.cuh>, e.g. a factory function returning the tensor.");
  }
  template <class U, class... Args>
  static void enqueue(Args&&...) {
    static_assert(dependent_false<U, B>,
                  "ferry: staged_write_tensor::apply_write and fused_staged_writer::apply launch a "
                  "CUDA kernel: build this translation unit with nvcc and include <ferry/ferry.cuh>.");
  }
  template <class U, class... Args>
  static bool enqueue_inline(Args&&...) {
    static_assert(dependent_false<U, B>,
                  "ferry: staged_write_tensor::apply_write launches a CUDA kernel: build this "
                  "translation unit with nvcc and include <ferry/ferry.cuh>.");
    return false;
  }
};

}  // namespace ferry::detail
