// ferry/write/chunk.hpp: the write plan's format, shared by every staged write
// (staged_write_tensor, fused_staged_writer) and every step (step_batch): the one descriptor
// (chunk_desc), the bounds rule of a write, and the host's kernel body (run_chunks_now).
//
// A descriptor has one meaning: `count` words of the kernel's word type from word `src` to word
// `dst`, indices from the two bases its apply names, or, when `fill` is non-zero, the `fill`-byte
// value at `src` written over `count` words at `dst`. What the recorder (write/recorder.hpp)
// writes are element indices: staged_write_tensor's apply names its target and its slot's
// contents as the bases; fused_staged_writer adds those bases to the indices and runs them from
// bases 0; a step encodes its targets' writes, copies and fills as bytes from bases 0 (the step
// table's step_desc, step/detail/plan.hpp). The kernel body that runs one is write/kernel.cuh.
// The write plan's tuning (chunk bytes, block threads, vector width, congruence_min_bytes,
// overlap_tracker_rows) is in detail/tuning.hpp.
#pragma once

#include <ferry/config.hpp>
#include <ferry/detail/tuning.hpp>

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

}  // namespace ferry::detail
