// ferry/staged/detail/staging.hpp: one batch of staged writes in a pinned slot (see layout.hpp),
// recorded by the write plan's recorder (write/recorder.hpp), and its capacity rules (the
// GrowthPolicy's).
#pragma once

#include <ferry/detail/checked.hpp>
#include <ferry/detail/source_range.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/staged/detail/layout.hpp>
#include <ferry/staged/detail/slot_pool.hpp>
#include <ferry/staged/staging_memory.hpp>
#include <ferry/write/recorder.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <ranges>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace ferry::detail {

template <class T, class B, growth_policy Growth, class Reuse>
class staging_core {
  static constexpr std::size_t per_chunk = elements_per_chunk<T>;
  static constexpr bool fixed = Growth::stable_addresses;

 public:
  using pool_type = slot_pool<B, Growth, Reuse>;

  staging_core(std::size_t rows, std::size_t cols, std::size_t slots, int device,
               const staging_memory<B>& memory)
      : slots_(slots), arena_(memory.arena), pool_(slots, device, memory), recorder_(rows, cols) {}

  // ---- staging --------------------------------------------------------------------------------

  /// Records one write of `r` to [row][start, start + size(r)). Throws std::out_of_range (bounds)
  /// or ferry::capacity_error (growth::fixed, arena cap) with nothing recorded. Inlined into the
  /// caller's loop: an engine stages hundreds of writes per apply, and the hand-written floor of
  /// that loop is a memcpy and a descriptor store (docs/performance.md).
  template <class R>
  FERRY_FORCE_INLINE void stage(std::size_t row, std::size_t start, R&& r) {
    const std::size_t len = count_of(r);
    const std::uint64_t dst = recorder_.destination(row, start, len);
    if (len == 0) return;
    const std::size_t bytes = len * sizeof(T);  // within the target's bytes (constructor-checked)
    // The slot's contents start 256-aligned: offsets suffice.
    const std::size_t pad = write_recorder::placement_pad(used_, dst * sizeof(T), bytes, sizeof(T));
    const std::size_t off = used_ + pad;
    const std::size_t chunks = write_recorder::chunks_of(len, per_chunk);
    const std::size_t end = checked_add<capacity_error>(off, bytes, "staged contents");
    // One test in steady state: the caps are 0 while no slot is current.
    if (chunks_ + chunks > desc_cap_ || end > content_cap_ || over_fixed_limits(len)) [[unlikely]]
      make_room(chunks, end, len);  // may throw: nothing recorded
    // The slot's addresses are read before the contents are written: a write through a byte
    // pointer may alias any member, which would otherwise be reloaded after it (a few ns a write).
    std::byte* const slot = pool_.current().block.data;
    T* const out = reinterpret_cast<T*>(slot + content_off_ + off);
    chunk_desc* const d = reinterpret_cast<chunk_desc*>(slot) + chunks_;
    // A reused slot was last read by the GPU: its lines are fetched again for writing. Asked for
    // a few writes ahead, those fetches overlap instead of queueing behind the stores.
    __builtin_prefetch(reinterpret_cast<const std::byte*>(out) + staging_prefetch_bytes, 1);
    __builtin_prefetch(reinterpret_cast<const std::byte*>(d) + staging_prefetch_bytes, 1);
    const std::uint64_t src = off / sizeof(T);
    recorder_.note(row, start, len);  // before a gather that may throw: only conservative
    if constexpr (!std::ranges::contiguous_range<R>) fill(r, out, len);  // may throw: nothing recorded
    // Two counters are stored per write; pending() and pending_elements() derive the others. The
    // one-descriptor write is spelled out: a known count of 1 is an increment, not a split.
    if (chunks == 1) [[likely]] {
      *d = {dst, src, static_cast<std::uint32_t>(len), 0};
    } else {
      write_recorder::split(d, dst, src, len, per_chunk);
      extra_chunks_ += chunks - 1;
    }
    padding_ += pad;
    chunks_ += chunks;
    used_ = end;
    if constexpr (std::ranges::contiguous_range<R>)  // cannot throw
      copy_bytes(out, std::ranges::data(r), bytes);
  }

  /// Writes staged: the chunks less those that continue a write (modulo 2^64: resolving overlaps
  /// may leave fewer chunks than writes).
  [[nodiscard]] std::size_t pending() const noexcept { return chunks_ - extra_chunks_; }
  /// Elements staged: the contents' bytes but for the congruence padding.
  [[nodiscard]] std::size_t pending_elements() const noexcept { return (used_ - padding_) / sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return chunks_ == 0; }

  /// Drops the staged writes (the slot stays current: nothing was handed to a stream).
  void clear() noexcept {
    chunks_ = used_ = extra_chunks_ = padding_ = 0;
    recorder_.reset();
  }

  /// Capacity for `max_writes` writes of `max_elements` elements in all, allocated now for every
  /// slot (and device scratch when `with_scratch`: for the contents, or for the whole slot, chunk
  /// table included, when `whole_slot`). Under growth::fixed this is the capacity. A request whose
  /// sizes cannot be represented throws ferry::capacity_error with nothing changed.
  void reserve(std::size_t max_writes, std::size_t max_elements, bool with_scratch, bool whole_slot = false) {
    if constexpr (fixed) {  // the limits are the largest asked so far: size the slots for both
      max_writes = std::max(max_writes_, max_writes);
      max_elements = std::max(max_elements_, max_elements);
    }
    write_recorder::room need{};
    if (!write_recorder::capacity(max_writes, max_elements, sizeof(T), need))
      throw capacity_error("ferry: staged_write_tensor::reserve(" + std::to_string(max_writes) +
                           ", " + std::to_string(max_elements) + ") overflows size_t");
    std::size_t wd = std::max(want_descs_, need.descs);
    std::size_t wb = std::max(want_bytes_, need.bytes);
    if constexpr (!fixed) {
      wd = grown_capacity<Growth>(wd, want_descs_);
      wb = grown_contents(wd, wb);
    }
    (void)slot_size(wd, wb);  // every size is checked before anything changes
    const wanted was = keep_wanted();
    want_descs_ = wd;
    want_bytes_ = wb;
    try {
      refuse_past_arena_cap();
      // The pinned slots first: the arena (its cap, its largest block) refuses what no slot can
      // hold. Only then the resolver's host memory, bounded by the descriptors a slot now holds.
      if (pool_.has_current() && (desc_cap_ < want_descs_ || content_cap_ < want_bytes_))
        regrow(want_descs_, want_bytes_);
      pool_.reserve(slot_bytes(), with_scratch ? (whole_slot ? slot_bytes() : want_bytes_) : 0);
      recorder_.reserve(want_descs_, "staged_write_tensor::reserve");
    } catch (...) {
      restore(was);  // a capacity no block can hold (a GrowthPolicy's answer) is not kept
      throw;
    }
    if constexpr (fixed) {
      max_writes_ = max_writes;
      max_elements_ = max_elements;
    }
  }

  // ---- apply support --------------------------------------------------------------------------

  /// Resolves overlaps (later write wins) into a disjoint chunk table. May throw (capacity) with
  /// the staged writes intact.
  void prepare() {
    pool_.begin_apply();
    const std::vector<chunk_desc>* resolved = recorder_.resolve(descs(), chunks_, per_chunk);
    if (resolved == nullptr) {
      recorder_.resolved();
      return;
    }
    const auto& out = *resolved;
    if (out.size() > desc_cap_) {
      if constexpr (fixed)
        throw capacity_error("ferry: resolving overlapping staged writes needs " +
                             std::to_string(out.size()) + " chunks, more than the " +
                             std::to_string(desc_cap_) + " that reserve() gave (growth::fixed)");
      else
        regrow(grown_capacity<Growth>(out.size(), desc_cap_), want_bytes_);
    }
    const std::size_t writes = pending();
    std::copy(out.begin(), out.end(), descs());
    chunks_ = out.size();
    extra_chunks_ = chunks_ - writes;  // modulo 2^64: painting may drop covered chunks
    recorder_.resolved();
  }

  [[nodiscard]] std::size_t chunks() const noexcept { return chunks_; }
  [[nodiscard]] std::size_t content_bytes() const noexcept { return used_; }
  [[nodiscard]] const chunk_desc* chunk_table() noexcept { return descs(); }
  [[nodiscard]] const std::byte* content_data() noexcept { return contents(); }
  /// Device scratch for the current slot's contents (H2D path): the scratch of `s`, sized to the
  /// slots' content capacity at once, so that it is allocated once, not at every larger apply.
  /// Allocated stream-ordered on `s` (the apply's stream) when it must grow.
  std::byte* scratch(stream_ref<B> s) { return pool_.scratch(std::max(used_, want_bytes_), s); }
  /// The current slot's chunk table and contents as one range, the table first and the contents
  /// from content_offset() (256-aligned): what an apply copies whole where no kernel may read
  /// pinned memory in place; slot_bytes_used() of it are staged.
  [[nodiscard]] const std::byte* slot_data() noexcept { return pool_.current().block.data; }
  [[nodiscard]] std::size_t content_offset() const noexcept { return content_off_; }
  [[nodiscard]] std::size_t slot_bytes_used() const noexcept { return content_off_ + used_; }
  /// Device scratch for the whole current slot (scratch(), chunk table included).
  std::byte* slot_scratch(stream_ref<B> s) { return pool_.scratch(content_off_ + std::max(used_, want_bytes_), s); }
  /// The launch has been enqueued without reading the slot (the inline path: the chunk table and
  /// contents travelled in the launch's parameters): the slot stays current, unfenced; a new
  /// batch starts in it.
  void commit_inline() noexcept { clear(); }
  /// The launch that reads the slot has been enqueued and is done once `done` has passed: rotate
  /// the slot, and start a new batch.
  void commit(stamp done) noexcept {
    pool_.commit(done);
    unlayout();
    clear();
  }
  /// The launch that reads the slot has been enqueued but could not be stamped: the slot is
  /// abandoned (never rewritten under its reader), and a new batch starts in a fresh one.
  void abandon() noexcept {
    pool_.abandon();
    unlayout();
    clear();
  }
  pool_type& pool() noexcept { return pool_; }

 private:
  // reserve(): throws ferry::capacity_error, before any block is taken, when the slots the pool
  // must add and the current slot's regrowth at the wanted size cannot fit under the arena's cap
  // even if nothing else were held (a lower bound of what reserve takes: were it to fail half-way,
  // the blocks taken would stay held, and a later write could find the arena full).
  void refuse_past_arena_cap() {
    const std::size_t bytes = slot_bytes();
    if (bytes > (std::size_t{1} << 62)) return;  // no block that large: the arena refuses it first
    const std::size_t block = std::bit_ceil(std::max(bytes, pinned_arena<B>::min_block));
    const bool regrows = pool_.has_current() && (desc_cap_ < want_descs_ || content_cap_ < want_bytes_);
    const std::size_t blocks = (regrows ? 1 : 0) + (slots_ > pool_.owned() ? slots_ - pool_.owned() : 0);
    const auto st = arena_->stats();
    std::size_t in_use = st.bytes_in_use - (regrows ? pool_.current().block.capacity : 0), need = 0;
    if (blocks == 0 || (mul_fits(blocks, block, need) && add_fits(in_use, need, in_use) && in_use <= st.byte_cap))
      return;
    throw capacity_error("ferry: staged_write_tensor::reserve: " + std::to_string(blocks) + " staging slots of " +
                         std::to_string(block) + " bytes do not fit the pinned arena's cap of " +
                         std::to_string(st.byte_cap) + " bytes (" + std::to_string(st.bytes_in_use) + " in use)");
  }

  // growth::fixed: whether one more write of `len` elements exceeds what reserve() set.
  [[nodiscard]] bool over_fixed_limits(std::size_t len) const noexcept {
    if constexpr (fixed)
      return pending() + 1 > max_writes_ || pending_elements() + len > max_elements_;
    else
      return false;
  }

  // Makes the current slot hold `chunks` more descriptors and contents up to `end_bytes` (the
  // slow path of stage(): no slot yet, a slot to grow, or growth::fixed's limits reached).
  [[gnu::noinline]] void make_room(std::size_t chunks, std::size_t end_bytes, std::size_t len) {
    const wanted was = keep_wanted();
    try {
      make_room_or_throw(chunks, end_bytes, len);
    } catch (...) {
      restore(was);  // a capacity no block can hold (a GrowthPolicy's answer) is not kept
      throw;
    }
  }
  // The capacities wanted for every slot, kept so that a call that throws leaves them as they were.
  struct wanted {
    std::size_t descs, bytes;
  };
  [[nodiscard]] wanted keep_wanted() const noexcept { return {want_descs_, want_bytes_}; }
  // (The current slot keeps its own layout: a regrow that succeeded before the throw sized it.)
  void restore(wanted w) noexcept {
    want_descs_ = w.descs;
    want_bytes_ = w.bytes;
  }
  void make_room_or_throw(std::size_t chunks, std::size_t end_bytes, std::size_t len) {
    if constexpr (fixed) {
      write_recorder::check_limits("staged_write_tensor", "apply (set by reserve)", pending(),
                                   pending_elements(), len, max_writes_, max_elements_);
    } else if (chunks_ + chunks > want_descs_ || end_bytes > want_bytes_) {
      // The capacities every slot is wanted at grow once, by the GrowthPolicy, from themselves.
      want_descs_ = std::max(want_descs_, grown_capacity<Growth>(chunks_ + chunks, want_descs_));
      want_bytes_ = std::max(want_bytes_, grown_contents(want_descs_, end_bytes));
    }
    if (!pool_.has_current()) {
      pool_.acquire_current(slot_bytes());
      layout();
    }
    if (chunks_ + chunks > desc_cap_ || end_bytes > content_cap_) {
      if constexpr (fixed)
        throw capacity_error("ferry: staging slot too small under growth::fixed");
      else
        regrow(want_descs_, want_bytes_);
    }
  }

  // The bytes of a chunk table of `descs` descriptors, padded to the contents' alignment.
  static std::size_t table_bytes(std::size_t descs) {
    const char* what = "a staging chunk table";
    const std::size_t b = checked_bytes<capacity_error>(descs, sizeof(chunk_desc), what);
    return checked_round_up<capacity_error>(b, content_alignment, what);
  }
  // The bytes of a slot of `descs` descriptors and `bytes` of contents.
  static std::size_t slot_size(std::size_t descs, std::size_t bytes) {
    return checked_add<capacity_error>(table_bytes(descs), bytes, "a staging slot");
  }
  // The content capacity of the slot the GrowthPolicy grows to for `descs` descriptors and
  // `bytes` of contents. The slot is grown as a whole (arena blocks are powers of two): growing
  // each part would make a pow2 slot for 4 MiB of contents a 16 MiB block.
  std::size_t grown_contents(std::size_t descs, std::size_t bytes) const {
    return grown_capacity<Growth>(slot_size(descs, bytes), slot_bytes()) - table_bytes(descs);
  }
  [[nodiscard]] std::size_t slot_bytes() const { return slot_size(want_descs_, want_bytes_); }
  // No current slot: its capacities are 0, so that stage() takes the slow path.
  void unlayout() noexcept { desc_cap_ = content_off_ = content_cap_ = 0; }
  void layout() noexcept {
    const auto& b = pool_.current().block;
    desc_cap_ = want_descs_;
    content_off_ = round_up(desc_cap_ * sizeof(chunk_desc), content_alignment);
    content_cap_ = b.capacity - content_off_;
  }
  // A bigger block for the current slot (only while growing), wanted from now on for every slot.
  // It holds what is staged as well as `wd` descriptors and `wb` bytes of contents: the current
  // block may hold more than the capacity wanted so far (a larger block was reused, or rounded up).
  void regrow(std::size_t wd, std::size_t wb) {
    const std::size_t d = std::max({wd, want_descs_, chunks_});
    std::size_t b = std::max({wb, want_bytes_, used_});
    if constexpr (!fixed) b = grown_contents(d, b);
    const pinned_block old = pool_.begin_grow(slot_size(d, b));  // may throw: nothing changed
    const std::size_t old_off = content_off_;
    want_descs_ = d;
    want_bytes_ = b;
    layout();
    std::memcpy(descs(), old.data, chunks_ * sizeof(chunk_desc));
    std::memcpy(contents(), old.data + old_off, used_);
    pool_.finish_grow(old);
  }

  chunk_desc* descs() noexcept { return reinterpret_cast<chunk_desc*>(pool_.current().block.data); }
  std::byte* contents() noexcept { return pool_.current().block.data + content_off_; }

  std::size_t slots_;          // the slots the pool keeps
  pinned_arena<B>* arena_;     // the pool's arena
  pool_type pool_;
  write_recorder recorder_;
  // capacities wanted for every slot, and the current slot's layout
  std::size_t want_descs_ = 0, want_bytes_ = 0;
  std::size_t desc_cap_ = 0, content_off_ = 0, content_cap_ = 0;
  // the batch: chunks and content bytes; the chunks that are no write, and the padding bytes
  std::size_t chunks_ = 0, used_ = 0, extra_chunks_ = 0, padding_ = 0;
  // growth::fixed limits
  std::size_t max_writes_ = 0, max_elements_ = 0;
};

}  // namespace ferry::detail
