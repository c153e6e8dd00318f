// ferry/write/recorder.hpp: the one recorder of row-segment writes into a rows x cols
// target, shared by staged_write_tensor (staging.hpp), fused_staged_writer (which applies what
// tensors recorded) and step_batch's write targets (step/detail/step_plan.hpp).
//
// It holds the rules every recorded write follows, written once:
//  - bounds: row < rows, start <= cols, len <= cols - start, checked even for an empty write;
//  - chunking: a write becomes one descriptor (write/chunk.hpp's chunk_desc) per `per_chunk` elements,
//    one thread block each;
//  - placement: contents of a write of congruence_min_bytes or more are placed congruent to their
//    destination mod the kernels' vector width, so that the kernel body copies them with 16-byte
//    vectors (placement_pad);
//  - capacity: what N writes of M elements take, descriptors and bytes (capacity);
//  - later write wins: overlaps are noted while recording (overlap_tracker) and resolved into
//    disjoint descriptors before a launch (overlap_resolver);
//  - limits: growth::fixed's writes and elements per launch.
// Where the descriptors and contents live (a staging slot, a step's table) is the owner's.
#pragma once

#include <ferry/config.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/error.hpp>
#include <ferry/write/chunk.hpp>
#include <ferry/write/overlap.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::detail {

class write_recorder {
 public:
  /// The recorder of writes into a rows x cols target.
  write_recorder(std::size_t rows, std::size_t cols) : rows_(rows), cols_(cols), tracker_(rows, cols) {}

  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::size_t cols() const noexcept { return cols_; }

  /// The destination element (row * cols + start) of a write of `len` elements at [row][start];
  /// std::out_of_range naming them when it leaves the target (checked even for an empty write).
  FERRY_FORCE_INLINE std::uint64_t destination(std::size_t row, std::size_t start, std::size_t len) const {
    check_write_bounds(row, start, len, rows_, cols_);
    return static_cast<std::uint64_t>(row) * cols_ + start;
  }

  /// The descriptors a write of `len` elements takes, `per_chunk` elements each.
  static constexpr std::size_t chunks_of(std::size_t len, std::size_t per_chunk) noexcept {
    return ceil_div(len, per_chunk);
  }
  /// Writes the chunks_of(len, per_chunk) descriptors of a copy of `len` elements from `src` to
  /// `dst` (element indices) at `d`.
  FERRY_FORCE_INLINE static void split(chunk_desc* d, std::uint64_t dst, std::uint64_t src, std::size_t len,
                                       std::size_t per_chunk) noexcept {
    if (len <= per_chunk) [[likely]] {
      *d = {dst, src, static_cast<std::uint32_t>(len), 0};
      return;
    }
    for (std::size_t c = 0, e = 0; e < len; ++c, e += per_chunk)
      d[c] = {dst + e, src + e, static_cast<std::uint32_t>(std::min(per_chunk, len - e)), 0};
  }
  /// The placement rule of every write's contents: contents of a write of `bytes` bytes, `elem`
  /// bytes an element, that would start at `at` (an address, or an offset with the same residue)
  /// are padded to start congruent to its destination byte address `dst` modulo the kernels'
  /// vector width when the write has congruence_min_bytes or more (the kernel then copies its
  /// body with 16-byte vectors), else only to the next element boundary. The padding is below
  /// write_vector_bytes: capacity() counts that much per write.
  static constexpr std::size_t placement_pad(std::uintptr_t at, std::uintptr_t dst, std::size_t bytes,
                                             std::size_t elem) noexcept {
    return bytes >= congruence_min_bytes ? congruence_pad(at, dst) : (elem - at % elem) % elem;
  }
  /// The padding that places contents at `at` congruent to `dst` modulo the kernels' vector width.
  static constexpr std::size_t congruence_pad(std::uintptr_t at, std::uintptr_t dst) noexcept {
    const std::size_t want = dst % write_vector_bytes;
    return (want + write_vector_bytes - at % write_vector_bytes) % write_vector_bytes;
  }

  /// What a batch of `writes` writes of `elements` elements of `elem` bytes in all can take: the
  /// descriptors of its resolved table and the bytes of its contents with their padding.
  struct room {
    std::size_t descs, bytes;
  };
  /// The one capacity formula of the write plan, for a staging slot, a fused apply and a step's
  /// write target alike: 2 * writes + ceil(elements / elements per chunk) descriptors, and
  /// elements * elem + writes * write_vector_bytes bytes. The descriptors bound the resolved
  /// table: painting later-wins leaves at most 2 * writes - 1 disjoint segments, of at most
  /// `elements` elements in all, each split into chunks (at most one more than its length needs).
  /// False, with `out` unchanged, when a count cannot be represented.
  [[nodiscard]] static constexpr bool capacity(std::size_t writes, std::size_t elements, std::size_t elem,
                                               room& out) noexcept {
    const std::size_t per_chunk = write_chunk_bytes / elem;
    const std::size_t chunks = elements / per_chunk + (elements % per_chunk != 0);
    std::size_t twice = 0, descs = 0, contents = 0, padding = 0, bytes = 0;
    if (!mul_fits(writes, 2, twice) || !add_fits(twice, chunks, descs) || !mul_fits(elements, elem, contents) ||
        !mul_fits(writes, write_vector_bytes, padding) || !add_fits(contents, padding, bytes))
      return false;
    out = {descs, bytes};
    return true;
  }

  /// Notes a write of `len` elements at [row][start] (before its contents are gathered: a gather
  /// that throws leaves the note, which is only conservative).
  FERRY_FORCE_INLINE void note(std::size_t row, std::size_t start, std::size_t len) noexcept {
    tracker_.note(row, start, start + len);
  }

  /// growth::fixed: throws ferry::capacity_error when a write of `len` elements after `writes`
  /// writes of `elements` elements exceeds `max_writes` writes of `max_elements` elements per
  /// `per` (what `who`'s reserve or plan set).
  static void check_limits(const char* who, const char* per, std::size_t writes, std::size_t elements,
                           std::size_t len, std::size_t max_writes, std::size_t max_elements) {
    if (writes + 1 > max_writes || elements + len > max_elements) [[unlikely]]
      throw_over_limits(who, per, writes, elements, len, max_writes, max_elements);
  }

  /// The descriptors d[0, n) (recorded in staging order) with every overlap resolved, the later
  /// write winning, split into chunks of `per_chunk` elements; null when they are disjoint (the
  /// table stands as it is). The owner stores the result, then calls resolved(); until then the
  /// batch stays suspect, so that a store that throws is resolved again by the next launch.
  [[nodiscard]] const std::vector<chunk_desc>* resolve(const chunk_desc* d, std::size_t n, std::size_t per_chunk) {
    if (!tracker_.suspect() || n == 0) return nullptr;
    if (!resolver_.any_overlap(d, n)) return nullptr;
    return &resolver_.paint(d, n, per_chunk);
  }
  /// True when two writes noted since the last reset() or resolved() may overlap.
  [[nodiscard]] bool suspect() const noexcept { return tracker_.suspect(); }
  /// The recorded descriptors are known disjoint (resolved, or found so).
  void resolved() noexcept { tracker_.resolved(); }
  /// Room to resolve `chunks` descriptors without allocating: a count a pinned slot already holds
  /// (so that the arena has refused a huge one first); ferry::out_of_memory naming `who` otherwise.
  void reserve(std::size_t chunks, const char* who) { resolver_.reserve(chunks, who); }
  /// A new, empty batch.
  void reset() noexcept { tracker_.reset(); }

 private:
  [[noreturn]] FERRY_COLD static void throw_over_limits(const char* who, const char* per, std::size_t writes,
                                                        std::size_t elements, std::size_t len,
                                                        std::size_t max_writes, std::size_t max_elements) {
    throw capacity_error(std::string("ferry: ") + who + " under growth::fixed holds at most " +
                         std::to_string(max_writes) + " writes of " + std::to_string(max_elements) +
                         " elements per " + per + "; a write of " + std::to_string(len) + " elements after " +
                         std::to_string(writes) + " writes of " + std::to_string(elements) +
                         " elements exceeds it");
  }

  std::size_t rows_, cols_;
  overlap_tracker tracker_;
  overlap_resolver resolver_;
};

}  // namespace ferry::detail
