// ferry/staged/detail/layout.hpp: the write plan's format, shared by every staged write
// (staged_write_tensor, fused_staged_writer) and every step (step_batch): the one descriptor
// (chunk_desc), the one set of constants that shape it, and what an apply hands to its kernel.
//
// A descriptor moves `count` words of the kernel's word type from `src` to `dst` (word indices
// from the bases the kernel is given; absolute addresses over bytes when the bases are 0), or,
// when `fill` is non-zero, writes the `fill`-byte value at `src` over `count` words at `dst`.
// staged_write_tensor's words are its elements and its indices are relative to its target and
// contents; fused_staged_writer's are absolute element indices; a step's are bytes at absolute
// addresses. The recorder that writes descriptors is write_plan.hpp; the kernel body that runs
// one is write_kernel.cuh (the host's: run_chunks_now below).
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

#include <ferry/detail/math.hpp>
#include <ferry/detail/tuning.hpp>  // the write plan's constants: chunk bytes, block threads, vector width
#include <ferry/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace ferry::detail {

/// Throws std::out_of_range naming a write of `len` elements at [row][start] of a rows x cols target.
[[noreturn]] FERRY_COLD inline void throw_write_out_of_bounds(std::size_t row, std::size_t start, std::size_t len,
                                                              std::size_t rows, std::size_t cols) {
  throw std::out_of_range("ferry: stage_write out of bounds: row " + std::to_string(row) + ", start " +
                          std::to_string(start) + ", len " + std::to_string(len) + " for a " +
                          std::to_string(rows) + " x " + std::to_string(cols) +
                          " target (needs row < rows, start <= cols, len <= cols - start)");
}
/// The bounds rule of every staged write, checked even for an empty one: row < rows,
/// start <= cols, len <= cols - start.
inline void check_write_bounds(std::size_t row, std::size_t start, std::size_t len, std::size_t rows,
                               std::size_t cols) {
  if (row >= rows || start > cols || len > cols - start) [[unlikely]]
    throw_write_out_of_bounds(row, start, len, rows, cols);
}

/// One descriptor of the write plan, one thread block's work: `count` words from `src` to `dst`
/// (word indices from the kernel's bases), or with `fill` non-zero, the `fill`-byte value at
/// `src` repeated over `count` words at `dst`. Read by the kernels as three 64-bit words.
struct chunk_desc {
  std::uint64_t dst;
  std::uint64_t src;
  std::uint32_t count;
  std::uint32_t fill;
};
static_assert(sizeof(chunk_desc) == 24, "chunk_desc is read by the kernel as 24 bytes");

// The write plan's tuning (write_chunk_bytes, write_block_threads, write_vector_bytes,
// congruence_min_bytes, staging_prefetch_bytes, overlap_tracker_rows, the inline apply's block
// sizes) is in detail/tuning.hpp.

/// Alignment of a slot's contents area and of device scratch (and of every arena block).
inline constexpr std::size_t content_alignment = 256;

/// The host's kernel body: runs `descs[0, n)` in order, each on words of `word` bytes at
/// `dst_base + dst * word` from `src_base + src * word` (a copy, or a fill with the value at src).
inline void run_chunks_now(const chunk_desc* descs, std::size_t n, std::uintptr_t dst_base,
                           std::uintptr_t src_base, std::size_t word) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const chunk_desc d = descs[i];
    auto* dst = reinterpret_cast<std::byte*>(dst_base + d.dst * word);
    const auto* src = reinterpret_cast<const std::byte*>(src_base + d.src * word);
    const std::size_t bytes = d.count * word;
    if (d.fill == 0) {
      std::memcpy(dst, src, bytes);
    } else {
      for (std::size_t at = 0; at < bytes; at += d.fill) std::memcpy(dst + at, src, d.fill);
    }
  }
}

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

/// Elements of T per chunk.
template <class T>
inline constexpr std::size_t elements_per_chunk = write_chunk_bytes / sizeof(T);

/// The unsigned integer type of T's size: kernels copy bits, not values.
template <class T>
struct word_of {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "ferry: kernels copy elements as words of 1, 2, 4 or 8 bytes");
  using type = std::conditional_t<
      sizeof(T) == 1, std::uint8_t,
      std::conditional_t<sizeof(T) == 2, std::uint16_t,
                         std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
};
template <class T>
using word_t = typename word_of<T>::type;

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
