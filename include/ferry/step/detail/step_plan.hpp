// ferry/step/detail/step_plan.hpp: a step_batch's plan and the open step's records: what was
// declared (uploads, publishes, write targets, gathers, fills, the epilogue) and its checks, the
// records its handles fill each step, their contents placed in the open slot (step_contents), the
// writes recorded through the write plan's recorder (write/recorder.hpp), and the
// step's encoding into a table (plan.hpp's format). It holds no slot: step_core passes the open
// step's contents down.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/detail/source_range.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/step/detail/plan.hpp>
#include <ferry/step/step_context.hpp>
#include <ferry/write/recorder.hpp>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <type_traits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ferry::detail {

/// A step_plan's epilogue state when it has none.
struct empty_epilogue {};

/// The open step's contents in its slot: bump-allocated in the slot's content block, a write's
/// contents by the write plan's placement rule, every other placement congruent to its
/// destination mod 16, so that the kernel copies bodies with 16-byte vectors. A step that
/// outgrows the block (not growth::fixed) takes another, at least twice as large, for the rest
/// of the step (the slot's `extra` blocks), so nothing handed out moves; the slot's next use
/// consolidates into one block of the largest step's size (step_slots).
template <class B, bool Fixed>
class step_contents {
 public:
  step_contents() = default;
  /// The contents of a step in `block`, taking further blocks from `arena` into `extra`, each
  /// counted in `grows`.
  step_contents(pinned_arena<B>& arena, const pinned_block& block, std::vector<pinned_block>& extra,
                std::uint64_t& grows) noexcept
      : arena_(&arena), extra_(&extra), grows_(&grows), base_(block.data), room_(block.capacity) {}

  /// `bytes` of contents of a record (an upload's, a publish's, a gather's or scatter's) for a
  /// destination at `dst` (0: none), placed congruent to it mod 16. Throws
  /// ferry::capacity_error (growth::fixed, arena cap) with nothing changed.
  std::byte* place(std::size_t bytes, std::uintptr_t dst) {
    return place_by(bytes, [=](std::uintptr_t at) { return write_recorder::congruence_pad(at, dst); });
  }
  /// `bytes` of a write's contents, elements of `elem` bytes for the destination address `dst`,
  /// placed by the write plan's rule (write_recorder::placement_pad).
  std::byte* place_write(std::size_t bytes, std::uintptr_t dst, std::size_t elem) {
    return place_by(bytes, [=](std::uintptr_t at) { return write_recorder::placement_pad(at, dst, bytes, elem); });
  }

  /// Room for `bytes` of a record's contents this step, at `at` holding `room` bytes (null: none
  /// yet): kept when it holds them, else placed again (place_again) at `bytes`, or at the record's
  /// whole `fixed_bytes` under growth::fixed; `at` and `room` follow. Throws with nothing changed.
  std::byte* room_for(std::byte*& at, std::size_t& room, std::size_t bytes, std::size_t fixed_bytes, std::uintptr_t dst) {
    if (at == nullptr || bytes > room) {
      const std::size_t want = Fixed ? fixed_bytes : bytes;
      at = place_again(at, room, want, dst);
      room = want;
    }
    return at;
  }

 private:
  // `bytes` at the next offset that `pad_at(address)` pads to.
  template <class Pad>
  std::byte* place_by(std::size_t bytes, Pad pad_at) {
    auto offset = [&](std::size_t used) { return used + pad_at(reinterpret_cast<std::uintptr_t>(base_) + used); };
    std::size_t off = offset(used_);
    if (off > room_ || bytes > room_ - off) {
      if constexpr (Fixed) {
        throw capacity_error("ferry: step_batch (growth::fixed): the step's contents exceed the "
                             "slot's " + std::to_string(room_) + " bytes");
      } else {
        const std::size_t need = checked_add<capacity_error>(bytes, write_vector_bytes, "step contents");
        extra_->reserve(extra_->size() + 1);  // first: the block taken is never lost
        const pinned_block b = arena_->acquire(std::max(need, room_));  // a power of two
        extra_->push_back(b);
        ++*grows_;
        base_ = b.data;
        room_ = b.capacity;
        used_ = 0;
        off = offset(0);
      }
    }
    used_ = off + bytes;
    return base_ + off;
  }

  /// `bytes` of contents for a record that holds `room` bytes at `at` this step (null: none yet),
  /// too few: grown in place when it is the step's last placement and the block holds it, else
  /// placed anew. (growth::fixed places a record's whole max_n at its first span(), so that a
  /// second, larger span() never takes the slot's room twice: its capacity plans one max_n each.)
  std::byte* place_again(std::byte* at, std::size_t room, std::size_t bytes, std::uintptr_t dst) {
    if (at != nullptr && at + room == base_ + used_) {
      const auto off = static_cast<std::size_t>(at - base_);
      if (bytes <= room_ - off) {
        used_ = off + bytes;
        return at;
      }
    }
    return place(bytes, dst);
  }

  pinned_arena<B>* arena_ = nullptr;
  std::vector<pinned_block>* extra_ = nullptr;
  std::uint64_t* grows_ = nullptr;
  std::byte* base_ = nullptr;
  std::size_t room_ = 0, used_ = 0;
};

/// The plan of a step_batch over backend B (`Fixed`: growth::fixed) with epilogue `Epilogue`
/// (void: none), and the open step's records.
template <class B, bool Fixed, class Epilogue>
class step_plan {
  using ops = backend_ops<B>;
  using contents = step_contents<B, Fixed>;

 public:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  /// The most rows a gather's source may have: its int32 indices reach rows [0, 2^31).
  static constexpr std::size_t max_gather_source = std::size_t{1} << 31;

  struct upload_rec {
    std::uintptr_t dst;
    std::size_t elem, limit, max_n, view;
    std::byte* at = nullptr;  // this step's contents (host address) and bytes
    std::size_t bytes = 0, room = 0;
  };
  struct publish_rec {
    std::size_t elem, max_n, view;
    std::byte* at = nullptr;  // the last step's contents (host address) and elements
    std::size_t n = 0, room = 0;
  };
  /// A one-element write: its element of the target, its value's bytes.
  struct single_write {
    std::uint64_t dst;
    alignas(8) std::byte value[8];
  };
  struct writes_rec {
    std::uintptr_t base;
    std::size_t elem, max_writes, max_elements;
    write_recorder rec;              // the target's rows x cols, and the write plan's rules
    std::vector<chunk_desc> chunks;  // the recorder's: elements from bases the target and 0
    std::size_t writes = 0, elements = 0;
    // One-element writes while none of the step's writes may overlap (`scatters`: element sizes
    // 1, 2, 4 or 8, targets of up to 2^32 elements), placed in the slot as one scatter record at
    // submit.
    bool scatters = false;
    std::vector<single_write> singles;
    std::byte* record = nullptr;  // this step's scatter record and its bytes
    std::size_t record_room = 0;
  };
  struct gather_rec {
    std::uintptr_t dst, src;
    std::size_t elem, limit, src_n, max_n, view;
    std::byte* at = nullptr;  // this step's record (piece_record + indices) and elements
    std::size_t n = 0, room = 0;
    std::byte* values = nullptr;  // this step's host values (when host_values() was called)
    std::size_t values_room = 0;
    bool has_values = false;
  };
  struct fill_rec {
    std::uintptr_t dst, src;
    std::size_t elem, bytes;
    std::size_t publish = none, index = 0;  // a source in a publish of this step, else `src`
  };

  using epilogue_state = std::conditional_t<std::is_void_v<Epilogue>, empty_epilogue, Epilogue>;

  step_plan() = default;
  step_plan(const step_plan&) = delete;
  step_plan& operator=(const step_plan&) = delete;

  // ---- the plan (before the first step) --------------------------------------------------------

  /// ferry::error once the plan is fixed (freeze()).
  void check_planning(const char* what) const {
    if (frozen_)
      throw error(std::string("ferry: step_batch::") + what +
                  ": the plan is fixed once the first step begins (or reserve() is called); "
                  "declare every upload, publish, write target and fill before");
  }

  /// What a range given to check_disjoint is: memory the step writes, or memory it reads.
  enum class range_kind { written, read };
  /// Throws std::invalid_argument when `bytes` at `at`, declared by `what` as its `kind` (a
  /// "destination", a "target", a "source"), overlap a destination declared before, or, for memory
  /// the step writes (`role`), a fill's device value or a gather's source declared before: a
  /// step's destinations are disjoint, and no step writes what a fill or gather reads, whichever
  /// is declared first. Empty ranges overlap nothing. Setup only (it walks the whole plan).
  void check_disjoint(const char* what, const char* kind, range_kind role, std::uintptr_t at, std::size_t bytes) const {
    if (bytes == 0) return;
    auto clash = [&](const char* other, std::uintptr_t o, std::size_t n) {
      if (n != 0 && at < o + n && o < at + bytes) throw_overlap(what, kind, at, bytes, other, o, n);
    };
    for (const auto& u : uploads_) clash("an upload's destination", u.dst, u.limit * u.elem);
    for (const auto& w : writes_) clash("a write target", w.base, w.rec.rows() * w.rec.cols() * w.elem);
    for (const auto& g : gathers_) clash("a gather's destination", g.dst, g.limit * g.elem);
    for (const auto& f : fills_) clash("a fill's destination", f.dst, f.bytes);
    if (role == range_kind::written) {
      for (const auto& f : fills_)
        if (f.publish == none) clash("a fill's device value", f.src, f.elem);
      for (const auto& g : gathers_) clash("a gather's source", g.src, g.src_n * g.elem);
    }
  }

  /// The plan fixed (step_core::reserve, once the slots are had): room in every write target's
  /// chunk list and resolver for `descs` descriptors (a count the slots' tables already hold), so
  /// that recording and resolving allocate nothing; host memory that cannot be had is
  /// ferry::out_of_memory naming `who`, with the plan not fixed.
  void freeze(std::size_t descs, const char* who) {
    for (auto& w : writes_) {
      try {
        w.chunks.reserve(descs);
        if (w.scatters) w.singles.reserve(descs);
      } catch (const std::exception&) {  // std::bad_alloc, std::length_error
        throw out_of_memory(std::string("ferry: ") + who + ": the host memory for " + std::to_string(descs) +
                            " chunks of a write target cannot be allocated");
      }
      w.rec.reserve(descs, who);
    }
    frozen_ = true;
  }
  [[nodiscard]] bool frozen() const noexcept { return frozen_; }
  /// The epilogue's state (set_epilogue(): before the plan is fixed).
  void set_epilogue(const epilogue_state& f) {
    check_planning("set_epilogue");
    epilogue_ = f;
  }
  [[nodiscard]] const epilogue_state* epilogue() const noexcept { return &epilogue_; }

  /// Declares an upload of up to `max_n` of `limit` elements of `elem` bytes into `dst`; its index.
  std::size_t add_upload(std::uintptr_t dst, std::size_t elem, std::size_t limit, std::size_t max_n) {
    check_planning("add_upload");
    if (max_n > limit)
      throw std::invalid_argument("ferry: step_batch::add_upload: max_n " + std::to_string(max_n) +
                                  " exceeds the destination's " + std::to_string(limit) + " elements");
    check_disjoint("add_upload", "destination", range_kind::written, dst, limit * elem);
    uploads_.push_back({dst, elem, limit, max_n, views_});
    ++views_;
    return uploads_.size() - 1;
  }
  /// Declares a publish of up to `max_n` elements of `elem` bytes; its index.
  std::size_t add_publish(std::size_t elem, std::size_t max_n) {
    check_planning("add_publish");
    (void)checked_bytes<capacity_error>(max_n, elem, "a publish");
    publishes_.push_back({elem, max_n, views_});
    ++views_;
    return publishes_.size() - 1;
  }
  /// Declares writes into the rows x cols target of `elem`-byte elements at `base`; its index.
  std::size_t add_writes(std::uintptr_t base, std::size_t rows, std::size_t cols, std::size_t elem,
                         std::size_t max_writes, std::size_t max_elements) {
    check_planning("add_writes");
    (void)checked_bytes<capacity_error>(max_elements, elem, "step_batch writes");
    const std::size_t bytes = checked_bytes(checked_bytes(rows, cols, "a write target"), elem, "a write target");
    check_disjoint("add_writes", "target", range_kind::written, base, bytes);
    const bool scatters = (elem == 1 || elem == 2 || elem == 4 || elem == 8) && rows * cols <= UINT32_MAX;
    writes_.push_back({base, elem, max_writes, max_elements, write_recorder(rows, cols), {}, 0, 0, scatters, {}, nullptr, 0});
    return writes_.size() - 1;
  }
  /// Declares a gather of up to `max_n` of `limit` elements of `elem` bytes into `dst` from the
  /// `src_n` elements at `src` (device memory, not written by the step); its index.
  std::size_t add_gather(std::uintptr_t dst, std::size_t elem, std::size_t limit, std::uintptr_t src,
                         std::size_t src_n, std::size_t max_n) {
    check_planning("add_gather");
    if (max_n > limit)
      throw std::invalid_argument("ferry: step_batch::add_gather: max_n " + std::to_string(max_n) +
                                  " exceeds the destination's " + std::to_string(limit) + " elements");
    (void)checked_bytes<capacity_error>(max_n, sizeof(std::int32_t) + elem, "a gather");
    if (src_n > max_gather_source) [[unlikely]]
      throw std::invalid_argument("ferry: step_batch::add_gather: a source of " + std::to_string(src_n) +
                                  " elements; gather indices are int32, so the rows from 2^31 on could never "
                                  "be read: pass the rows the gather reads (at most 2^31, e.g. src.first(n))");
    check_disjoint("add_gather", "destination", range_kind::written, dst, limit * elem);
    check_disjoint("add_gather", "source", range_kind::read, src, src_n * elem);
    if (limit * elem != 0 && src_n * elem != 0 && src < dst + limit * elem && dst < src + src_n * elem)
      throw std::invalid_argument("ferry: step_batch::add_gather: the gather's source overlaps its own destination");
    gathers_.push_back({dst, src, elem, limit, src_n, max_n, views_});
    ++views_;
    return gathers_.size() - 1;
  }
  /// Declares a fill of `bytes` at `dst` with the `elem`-byte value at `src` (a device address),
  /// or with element `index` of publish `publish` (not `none`).
  void add_fill(std::uintptr_t dst, std::size_t bytes, std::uintptr_t src, std::size_t elem, std::size_t publish,
                std::size_t index) {
    check_planning("add_fill");
    check_disjoint("add_fill", "destination", range_kind::written, dst, bytes);
    if (publish == none) {
      check_disjoint("add_fill", "source", range_kind::read, src, elem);
      if (bytes != 0 && src < dst + bytes && dst < src + elem)
        throw std::invalid_argument("ferry: step_batch::add_fill: the fill's source lies in its own destination");
    }
    fills_.push_back({dst, src, elem, bytes, publish, index});
  }

  /// Descriptors of `bytes` bytes of copies or fills.
  static std::size_t chunks_of(std::size_t bytes) noexcept { return ceil_div(bytes, write_chunk_bytes); }
  /// Descriptors of a gather or scatter of `n` elements.
  static std::size_t pieces_of(std::size_t n) noexcept { return ceil_div(n, piece_elements); }
  /// Bytes of a gather or scatter record of `n` indices (checked when the gather is declared).
  static std::size_t record_bytes(std::size_t n) noexcept { return sizeof(piece_record) + n * sizeof(std::int32_t); }
  /// Bytes of a scatter record of `n` values of `elem` bytes: the record, then the values from
  /// the next multiple of 8.
  static std::size_t scatter_bytes(std::size_t n, std::size_t elem) noexcept {
    return round_up(record_bytes(n), std::size_t{8}) + n * elem;
  }

  /// The bytes of a table of `descs` descriptors: header, descriptors, the view entries, the
  /// epilogue's bytes (ferry::capacity_error on overflow).
  [[nodiscard]] std::size_t table_bytes(std::size_t descs) const {
    const std::size_t d = checked_bytes<capacity_error>(descs, sizeof(step_desc), "a step table");
    return checked_add<capacity_error>(d, sizeof(step_header) + views_ * sizeof(step_view_entry) + 16 + epilogue_room,
                                       "a step table");
  }

  /// The declared maxima as a table (descriptors) and content (bytes) capacity, before the
  /// GrowthPolicy: every placement may pad by up to 15 bytes; a write target takes the write
  /// plan's capacity (write_recorder::capacity) and its scatter record's head. ferry::capacity_error
  /// when a sum overflows.
  [[nodiscard]] std::pair<std::size_t, std::size_t> declared_capacity() const {
    std::size_t descs = 0, bytes = 0;
    auto add = [](std::size_t& to, std::size_t n) { to = checked_add<capacity_error>(to, n, "a step plan"); };
    auto times = [](std::size_t a, std::size_t b) { return checked_bytes<capacity_error>(a, b, "a step plan"); };
    for (const auto& u : uploads_) {
      add(descs, chunks_of(times(u.max_n, u.elem)));
      add(bytes, times(u.max_n, u.elem));
      add(bytes, write_vector_bytes);
    }
    for (const auto& p : publishes_) {
      add(bytes, times(p.max_n, p.elem));
      add(bytes, write_vector_bytes);
    }
    for (const auto& w : writes_) {
      write_recorder::room r{};
      if (!write_recorder::capacity(w.max_writes, w.max_elements, w.elem, r))
        throw capacity_error("ferry: a step plan's write target of " + std::to_string(w.max_writes) + " writes of " +
                             std::to_string(w.max_elements) + " elements overflows size_t");
      add(descs, r.descs);
      add(bytes, r.bytes);
      add(bytes, sizeof(piece_record) + 8 + write_vector_bytes);  // a scatter record's head and padding
    }
    for (const auto& g : gathers_) {
      add(descs, pieces_of(g.max_n));
      add(bytes, record_bytes(g.max_n));
      add(bytes, times(g.max_n, g.elem));
      add(bytes, 2 * write_vector_bytes);
    }
    for (const auto& f : fills_) add(descs, chunks_of(f.bytes));
    return {std::max<std::size_t>(descs, 1), std::max(bytes, pinned_arena<B>::min_block)};
  }

  // ---- one step --------------------------------------------------------------------------------


  /// std::out_of_range when `n` elements of `what` (an upload or gather record `r`) exceed its
  /// destination; ferry::capacity_error when growth::fixed and they exceed its declared max_n.
  template <class Record>
  static void check_count(const Record& r, std::size_t n, const char* what) {
    if (n > r.limit)
      throw std::out_of_range(std::string("ferry: step_batch: ") + what + " of " + std::to_string(n) +
                              " elements into a destination of " + std::to_string(r.limit));
    if (Fixed && n > r.max_n)
      throw capacity_error(std::string("ferry: step_batch (growth::fixed): ") + what + " of " + std::to_string(n) +
                           " elements exceeds its declared max_n of " + std::to_string(r.max_n));
  }
  /// This step's `n` elements of `elem` bytes for upload `i`: where the host writes them.
  std::byte* upload_span(contents& c, std::size_t i, std::size_t n, std::size_t elem) {
    auto& r = uploads_[i];
    check_count(r, n, "an upload");
    // max_n * elem: checked when declared. The count only once the room is had: a span refused
    // (the arena's cap) leaves the step's earlier span of this upload, or none, as it was.
    std::byte* const at = c.room_for(r.at, r.room, n * elem, r.max_n * elem, r.dst);
    r.bytes = n * elem;
    return at;
  }
  /// This step's `n` indices for gather `i`: where the host writes them (the record's indices).
  std::int32_t* gather_indices(contents& c, std::size_t i, std::size_t n) {
    auto& r = gathers_[i];
    check_count(r, n, "a gather");
    if (n > max_pieces * piece_elements) [[unlikely]]
      throw capacity_error("ferry: step_batch: a gather of " + std::to_string(n) + " elements exceeds " +
                           std::to_string(max_pieces * piece_elements) + " elements");
    std::byte* const at = c.room_for(r.at, r.room, record_bytes(n), record_bytes(r.max_n), 0);
    r.n = n;
    r.has_values = false;
    return reinterpret_cast<std::int32_t*>(at + sizeof(piece_record));
  }
  /// This step's host values for gather `i` (its n of indices()), used where an index is
  /// from_host: where the host writes them.
  std::byte* gather_values(contents& c, std::size_t i) {
    auto& r = gathers_[i];
    if (r.at == nullptr)
      throw error("ferry: step_batch::gather::host_values: call indices(n) first in this step");
    std::byte* const at = c.room_for(r.values, r.values_room, r.n * r.elem, r.max_n * r.elem, 0);
    r.has_values = true;
    return at;
  }

  /// submit()'s checks of the open step: std::out_of_range for a fill from an element its publish
  /// does not hold this step, a gather index outside its source, or from_host without host values.
  void check_step() const {
    for (const auto& f : fills_) {
      if (f.publish != none && f.index >= publishes_[f.publish].n)
        throw std::out_of_range("ferry: step_batch::submit: a fill reads element " + std::to_string(f.index) +
                                " of a publish that holds " + std::to_string(publishes_[f.publish].n) +
                                " elements this step");
    }
    for (std::size_t g = 0; g < gathers_.size(); ++g) {
      const auto& r = gathers_[g];
      if (r.at == nullptr) continue;
      const auto* idx = reinterpret_cast<const std::int32_t*>(r.at + sizeof(piece_record));
      const auto src_n = static_cast<std::int64_t>(r.src_n);  // at most 2^31 (add_gather)
      const std::int32_t lowest = r.has_values ? from_host : 0;
      std::int32_t lo = 0, hi = 0;  // one pass without branches; the bad row is looked for after
      for (std::size_t i = 0; i < r.n; ++i) {
        lo = std::min(lo, idx[i]);
        hi = std::max(hi, idx[i]);
      }
      if (lo < lowest || hi >= src_n) [[unlikely]]
        for (std::size_t i = 0; i < r.n; ++i)
          if (idx[i] < lowest || idx[i] >= src_n) throw_bad_index(g, i, idx[i], r);
    }
  }

  /// This step's `n` elements of `elem` bytes for publish `i`: where the host writes them.
  std::byte* publish_span(contents& c, std::size_t i, std::size_t n, std::size_t elem) {
    auto& r = publishes_[i];
    if (Fixed && n > r.max_n)
      throw capacity_error("ferry: step_batch (growth::fixed): a publish of " + std::to_string(n) +
                           " elements exceeds its declared max_n of " + std::to_string(r.max_n));
    const std::size_t bytes = checked_bytes<capacity_error>(n, elem, "a publish");
    std::byte* const at = c.room_for(r.at, r.room, bytes, r.max_n * elem, 0);
    r.n = n;
    return at;
  }
  /// Records a write of the elements of `src` into target `i` at [row][start]: the write plan's
  /// bounds, limits and chunking; its contents placed in the slot congruent to the destination.
  /// A one-element write that overlaps no write before it joins the step's scatter instead.
  /// Throws with nothing recorded.
  template <class T, class R>
  void stage_write(contents& c, std::size_t i, std::size_t row, std::size_t start, R&& src) {
    using rec = write_recorder;
    auto& r = writes_[i];
    const std::size_t len = count_of(src);
    const std::uint64_t dst = r.rec.destination(row, start, len);
    if (len == 0) return;
    if constexpr (Fixed)
      rec::check_limits("a step_batch write target", "step", r.writes, r.elements, len, r.max_writes, r.max_elements);
    if (len == 1 && r.scatters) {
      r.rec.note(row, start, 1);  // first: a write that overlaps an earlier one must come after it
      if (!r.rec.suspect()) [[likely]] {
        single_write one{dst, {}};
        if constexpr (std::ranges::contiguous_range<R>)
          std::memcpy(one.value, std::ranges::data(src), sizeof(T));
        else
          fill(src, reinterpret_cast<T*>(one.value), 1);  // a gather may throw: nothing recorded
        r.singles.push_back(one);                       // may throw: nothing recorded
        ++r.writes;
        ++r.elements;
        return;
      }
    }
    T* const out = reinterpret_cast<T*>(c.place_write(len * sizeof(T), r.base + dst * sizeof(T), sizeof(T)));
    fill(src, out, len);  // a gather may throw: the placed bytes are only unused
    constexpr std::size_t per_chunk = elements_per_chunk<T>;
    const std::uint64_t from = reinterpret_cast<std::uintptr_t>(ops::mapped(out)) / sizeof(T);
    if (len <= per_chunk) [[likely]] {
      r.chunks.push_back({dst, from, static_cast<std::uint32_t>(len), 0});  // may throw: nothing recorded
    } else {
      const std::size_t at = r.chunks.size();
      r.chunks.resize(at + rec::chunks_of(len, per_chunk));  // may throw: nothing recorded
      rec::split(r.chunks.data() + at, dst, from, len, per_chunk);
    }
    r.rec.note(row, start, len);
    ++r.writes;
    r.elements += len;
  }

  /// The open step's descriptors and contents: `bytes` is what its handles hold now, each
  /// placement with its alignment slack (a slot of that size holds the same step in one block),
  /// so that a step whose sizes were made smaller after a refused submit is measured at its new
  /// sizes; `published`: some publish holds elements.
  struct step_size {
    std::size_t descs = 0, bytes = 0;
    bool published = false;
  };
  /// Resolves overlapping writes (later wins) and measures the step.
  step_size resolve_and_measure(contents& c) {
    step_size z;
    for (const auto& u : uploads_) {
      z.descs += chunks_of(u.bytes);
      if (u.at) z.bytes += u.bytes + write_vector_bytes;
    }
    for (auto& w : writes_) {
      if (w.rec.suspect()) [[unlikely]]
        unscatter(c, w);
      if (const auto* out = w.rec.resolve(w.chunks.data(), w.chunks.size(), write_chunk_bytes / w.elem))
        w.chunks.assign(out->begin(), out->end());  // may throw: still suspect, resolved again
      w.rec.resolved();
      z.descs += w.chunks.size() + pieces_of(w.singles.size());
      z.bytes += w.elements * w.elem + w.writes * write_vector_bytes;
    }
    for (const auto& p : publishes_) {
      if (p.at) z.bytes += p.n * p.elem + write_vector_bytes;
      z.published |= p.n != 0;
    }
    for (const auto& g : gathers_) {
      if (!g.at) continue;
      z.descs += pieces_of(g.n);
      z.bytes += record_bytes(g.n) + write_vector_bytes;
      if (g.has_values) z.bytes += g.n * g.elem + write_vector_bytes;
    }
    for (const auto& f : fills_) z.descs += chunks_of(f.bytes);
    return z;
  }

  /// A write target's one-element writes as chunks in front of the others, once a later write
  /// may overlap them (they were recorded before it, and overlap no write recorded before them,
  /// so they come first), in one pass. If placing one throws, they all stay scattered.
  void unscatter(contents& c, writes_rec& w) {
    const std::size_t n = w.singles.size();
    if (n == 0) return;
    w.chunks.reserve(w.chunks.size() + n);  // may throw: nothing moved
    w.chunks.insert(w.chunks.begin(), n, chunk_desc{});  // room reserved: no throw
    try {
      for (std::size_t i = 0; i < n; ++i) {
        const single_write& one = w.singles[i];
        std::byte* const out = c.place_write(w.elem, w.base + one.dst * w.elem, w.elem);
        std::memcpy(out, one.value, w.elem);
        w.chunks[i] = {one.dst, reinterpret_cast<std::uintptr_t>(ops::mapped(out)) / w.elem, 1, 0};
      }
    } catch (...) {
      w.chunks.erase(w.chunks.begin(), w.chunks.begin() + static_cast<std::ptrdiff_t>(n));
      throw;
    }
    w.singles.clear();
  }

  /// Places every write target's scatter record of this step (the last of submit's placements:
  /// nothing after it throws before the launch). growth::fixed places room for every
  /// one-element write the target's limits still allow, so that a submit tried again after more
  /// writes keeps the record's place. Throws with nothing changed but room taken.
  void place_scatters(contents& c) {
    for (auto& w : writes_) {
      const std::size_t n = w.singles.size();
      if (n == 0) continue;
      const std::size_t most =
          Fixed ? std::min(w.max_writes - (w.writes - n), w.max_elements - (w.elements - n)) : n;  // within the limits
      (void)c.room_for(w.record, w.record_room, scatter_bytes(n, w.elem), scatter_bytes(most, w.elem), 0);
    }
  }

  /// Encodes the open step, the `number`th (`step`: the device counter's value for it under
  /// launch::graph), into `table` of `cap` descriptors (room for
  /// resolve_and_measure's): every upload, write, gather and fill as descriptors over bytes at
  /// absolute addresses, and the view entries.
  void encode(std::byte* table, std::size_t cap, std::uint64_t step, std::uint64_t number) {
    step_desc* d = step_descs(table);
    std::size_t n = 0;
    auto put = [&](std::uintptr_t dst, std::uintptr_t src, std::size_t bytes, std::uint32_t fill) {
      for (std::size_t at = 0; at < bytes; at += write_chunk_bytes) {
        const std::size_t piece = std::min(write_chunk_bytes, bytes - at);
        d[n++] = {dst + at, fill ? src : src + at, static_cast<std::uint32_t>(piece), fill};
      }
    };
    auto* views = reinterpret_cast<step_view_entry*>(table + views_at(cap));
    auto mapped = [](const void* p) { return reinterpret_cast<std::uintptr_t>(ops::mapped(const_cast<void*>(p))); };
    for (const auto& u : uploads_) {
      if (u.bytes) put(u.dst, mapped(u.at), u.bytes, 0);
      views[u.view] = {u.dst, u.bytes / u.elem};
    }
    for (const auto& w : writes_) {
      for (const auto& ch : w.chunks)
        d[n++] = {w.base + ch.dst * w.elem, ch.src * w.elem, static_cast<std::uint32_t>(ch.count * w.elem), 0};
      const std::size_t singles = w.singles.size();
      if (singles == 0) continue;
      auto* idx = reinterpret_cast<std::uint32_t*>(w.record + sizeof(piece_record));
      std::byte* const values = w.record + round_up(record_bytes(singles), std::size_t{8});
      *reinterpret_cast<piece_record*>(w.record) = {0, mapped(values)};
      for (std::size_t i = 0; i < singles; ++i) {
        idx[i] = static_cast<std::uint32_t>(w.singles[i].dst);
        std::memcpy(values + i * w.elem, w.singles[i].value, w.elem);
      }
      put_pieces(d, n, w.base, mapped(w.record), singles, scatter_flag, w.elem);
    }
    for (const auto& g : gathers_) {
      views[g.view] = {g.dst, g.at ? g.n : 0};
      if (!g.at || g.n == 0) continue;
      *reinterpret_cast<piece_record*>(g.at) = {g.src, g.has_values ? mapped(g.values) : 0};
      put_pieces(d, n, g.dst, mapped(g.at), g.n, 0, g.elem);
    }
    for (const auto& f : fills_) {
      const std::uintptr_t src = f.publish == none ? f.src : mapped(publishes_[f.publish].at) + f.index * f.elem;
      put(f.dst, src, f.bytes, static_cast<std::uint32_t>(f.elem));
    }
    for (const auto& p : publishes_) views[p.view] = {p.at ? mapped(p.at) : 0, p.n};
    auto* h = reinterpret_cast<step_header*>(table);
    h->work = n;
    h->step = step;
    h->number = number;
    h->views = mapped(views);
  }

  /// The descriptors d[n...] of a record at `record` (mapped) of `count` elements of `elem` bytes:
  /// a gather's into `dst` (`kind` 0; each piece at its own first element) or a scatter's into the
  /// target at `dst` (`kind` scatter_flag).
  static void put_pieces(step_desc* d, std::size_t& n, std::uintptr_t dst, std::uintptr_t record, std::size_t count,
                         std::uint32_t kind, std::size_t elem) noexcept {
    for (std::size_t p = 0, first = 0; first < count; ++p, first += piece_elements)
      d[n++] = {kind ? dst : dst + first * elem, record, static_cast<std::uint32_t>(std::min(piece_elements, count - first)),
                piece_fill(kind, p, elem)};
  }

  /// Prepares a new table of `cap` descriptors: no step yet (launch::graph: a launch that finds
  /// it does nothing), and the epilogue's bytes where the host backend reads them.
  void init_table(std::byte* table, std::size_t cap) const noexcept {
    auto* h = reinterpret_cast<step_header*>(table);
    *h = {};
    h->step = ~std::uint64_t{0};
    if constexpr (!std::is_void_v<Epilogue>) {
      std::memcpy(table + epilogue_at(cap), static_cast<const void*>(&epilogue_), sizeof(Epilogue));
      h->epilogue = reinterpret_cast<std::uintptr_t>(table + epilogue_at(cap));
    }
  }

  /// The records of the open step dropped (begin() starts each step with this; cancel() ends one).
  void clear_step() noexcept {
    for (auto& u : uploads_) u = {u.dst, u.elem, u.limit, u.max_n, u.view};
    for (auto& p : publishes_) p = {p.elem, p.max_n, p.view};
    for (auto& g : gathers_) g = {g.dst, g.src, g.elem, g.limit, g.src_n, g.max_n, g.view};
    for (auto& w : writes_) {
      w.chunks.clear();
      w.singles.clear();
      w.record = nullptr;
      w.record_room = 0;
      w.rec.reset();
      w.writes = w.elements = 0;
    }
  }

  // ---- what the handles and the slots read ------------------------------------------------------

  [[nodiscard]] const upload_rec& upload(std::size_t i) const noexcept { return uploads_[i]; }
  [[nodiscard]] const publish_rec& publish(std::size_t i) const noexcept { return publishes_[i]; }
  [[nodiscard]] const gather_rec& gather(std::size_t i) const noexcept { return gathers_[i]; }
  [[nodiscard]] const writes_rec& writes(std::size_t i) const noexcept { return writes_[i]; }

 private:
  std::vector<upload_rec> uploads_;
  std::vector<publish_rec> publishes_;
  std::vector<writes_rec> writes_;
  std::vector<gather_rec> gathers_;
  std::vector<fill_rec> fills_;
  std::size_t views_ = 0;  // uploads, publishes and gathers: the epilogue's view entries
  // The epilogue's state (set_epilogue), fixed with the plan.
  [[no_unique_address]] epilogue_state epilogue_{};
  bool frozen_ = false;

  static std::string range(std::uintptr_t at, std::size_t bytes) {
    char hex[2 * sizeof(std::uintptr_t)];
    const auto end = std::to_chars(hex, hex + sizeof(hex), at, 16).ptr;
    return "[0x" + std::string(hex, end) + ", +" + std::to_string(bytes) + " bytes)";
  }
  static constexpr std::size_t epilogue_room =
      std::is_void_v<Epilogue> ? 0 : round_up(sizeof(std::conditional_t<std::is_void_v<Epilogue>, char, Epilogue>), 16);
  [[nodiscard]] std::size_t views_at(std::size_t descs) const noexcept {
    return sizeof(step_header) + descs * sizeof(step_desc);
  }
  [[nodiscard]] std::size_t epilogue_at(std::size_t descs) const noexcept {
    return round_up(views_at(descs) + views_ * sizeof(step_view_entry), 16);
  }
  [[noreturn]] FERRY_COLD static void throw_bad_index(std::size_t g, std::size_t i, std::int32_t j, const gather_rec& r) {
    if (j == from_host)
      throw std::out_of_range("ferry: step_batch::submit: row " + std::to_string(i) + " of gather " + std::to_string(g) +
                              " takes its value from the host (ferry::from_host), but host_values() was not "
                              "called this step");
    throw std::out_of_range("ferry: step_batch::submit: row " + std::to_string(i) + " of gather " + std::to_string(g) +
                            " has index " + std::to_string(j) + ", outside its source of " + std::to_string(r.src_n) +
                            " elements (an index is in [0, size) or ferry::from_host)");
  }
  [[noreturn]] FERRY_COLD static void throw_overlap(const char* what, const char* kind, std::uintptr_t at,
                                                    std::size_t bytes, const char* other, std::uintptr_t o,
                                                    std::size_t n) {
    throw std::invalid_argument(std::string("ferry: step_batch::") + what + ": the " + kind + " " +
                                range(at, bytes) + " overlaps " + other + " " + range(o, n) +
                                " declared before; a step's destinations must be disjoint, and the memory a "
                                "fill or gather reads is not written by the step");
  }
};

}  // namespace ferry::detail
