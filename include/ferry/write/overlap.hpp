// ferry/write/overlap.hpp: the "later write wins" rule of recorded writes (staged writes and a
// step's write targets).
//
// While staging, overlap_tracker keeps, per row, the hull [lo, hi) of the writes staged to it in
// this batch (a table of at most overlap_tracker_rows (4096) entries: a target of up to that many
// rows gives each row its own entry; above, a row's entry is its home, a hash of the row, or the
// next free one within overlap_tracker_probes, and only a row that finds none counts as a
// possible overlap: a batch of a few hundred rows of a large table is told apart). A write
// that falls outside its row's hull cannot overlap anything staged before it; that check is one
// table entry per stage_write in the common case, so batches without overlaps pay nothing else.
//
// Only when the tracker suspects an overlap does the apply run overlap_resolver: sort the chunks
// by destination and test neighbours (exact; a false alarm ends here), and when chunks really
// overlap, "paint" them: a sweep over the chunk boundaries that keeps, for every stretch of the
// destination, the chunk staged last (a max-heap of active chunk indices). The result is a new
// chunk table of disjoint destinations, each stretch taking its source from the last write that
// covered it, so one launch applies it with no ordering between blocks at all, deterministically,
// on both backends. The contents do not move.
#pragma once

#include <ferry/error.hpp>
#include <ferry/write/chunk.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace ferry::detail {

class overlap_tracker {
 public:
  /// A tracker for a rows x cols target. Entries are 16 bytes (32-bit row and column bounds), so
  /// that the table stays in the L1 cache; a target with more than 2^32 rows or columns is always
  /// suspected (the resolver's exact check decides).
  overlap_tracker(std::size_t rows, std::size_t cols)
      : table_(std::bit_ceil(std::clamp<std::size_t>(rows, 1, overlap_tracker_rows))),
        mask_(table_.size() - 1),
        shift_(64 - static_cast<unsigned>(std::countr_zero(table_.size()))),
        hashed_(rows > table_.size()),
        exact_(cols <= std::numeric_limits<std::uint32_t>::max() && rows <= std::numeric_limits<std::uint32_t>::max()),
        suspect_(!exact_) {}

  /// Notes a write to [lo, hi) of `row`.
  void note(std::uint64_t row, std::uint64_t lo, std::uint64_t hi) noexcept {
    if (suspect_) return;
    const auto r = static_cast<std::uint32_t>(row);
    const auto l = static_cast<std::uint32_t>(lo), h = static_cast<std::uint32_t>(hi);
    // Entries are only taken within a batch, never freed: a row noted before is met on its probe
    // sequence before any free entry. Rows of a larger target are hashed (Fibonacci), so that
    // neighbouring rows, and rows a table's size apart, do not crowd one stretch of the table.
    const std::uint64_t home = hashed_ ? (row * 0x9E3779B97F4A7C15ull) >> shift_ : row;
    for (std::size_t i = 0; i < overlap_tracker_probes; ++i) {
      entry& e = table_[(home + i) & mask_];
      if (e.epoch != epoch_) {
        e = {r, epoch_, l, h};
        return;
      }
      if (e.row != r) continue;
      if (l >= e.hi) {
        e.hi = h;
      } else if (h <= e.lo) {
        e.lo = l;
      } else {
        suspect_ = true;
      }
      return;
    }
    suspect_ = true;  // no entry within reach: tell nothing apart
  }
  /// True when two writes of this batch may overlap.
  [[nodiscard]] bool suspect() const noexcept { return suspect_; }
  /// The batch's chunks are known disjoint (the hulls stay: later writes are still checked).
  void resolved() noexcept { suspect_ = !exact_; }
  /// A new, empty batch.
  void reset() noexcept {
    suspect_ = !exact_;
    if (++epoch_ == 0) {
      for (auto& e : table_) e.epoch = 0;
      epoch_ = 1;
    }
  }

 private:
  struct entry {
    std::uint32_t row = 0, epoch = 0, lo = 0, hi = 0;
  };
  std::vector<entry> table_;
  std::size_t mask_;
  unsigned shift_;  // 64 - log2(table size): the hash's top bits index the table
  bool hashed_;     // more rows than entries
  bool exact_;
  std::uint32_t epoch_ = 1;
  bool suspect_;
};

class overlap_resolver {
 public:
  /// Room for `chunks` chunks, so that resolving allocates nothing. Callers reserve only a count
  /// that a pinned slot already holds (its descriptors), so that a huge request is refused by the
  /// arena first; host memory that still cannot be had is ferry::out_of_memory naming `who`
  /// (the vectors keep what they held).
  void reserve(std::size_t chunks, const char* who) {
    try {
      order_.reserve(chunks);
      events_.reserve(2 * chunks);
      heap_.reserve(chunks);
      segs_.reserve(2 * chunks);
      out_.reserve(3 * chunks + 1);
    } catch (const std::exception&) {  // std::bad_alloc, std::length_error
      throw out_of_memory(std::string("ferry: ") + who + ": the host memory to resolve overlaps among " +
                          std::to_string(chunks) + " chunks cannot be allocated");
    }
  }

  /// True when two of the chunks d[0, n) overlap in the destination.
  bool any_overlap(const chunk_desc* d, std::size_t n) {
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    std::sort(order_.begin(), order_.end(),
              [d](std::uint32_t a, std::uint32_t b) { return d[a].dst < d[b].dst; });
    for (std::size_t k = 0; k + 1 < n; ++k)
      if (d[order_[k]].dst + d[order_[k]].count > d[order_[k + 1]].dst) return true;
    return false;
  }

  /// The chunk table with every overlap resolved in favour of the chunk staged later (higher
  /// index), split into chunks of at most `per_chunk` elements.
  const std::vector<chunk_desc>& paint(const chunk_desc* d, std::size_t n, std::size_t per_chunk) {
    events_.clear();
    for (std::uint32_t i = 0; i < n; ++i) {
      events_.push_back({d[i].dst, i, true});
      events_.push_back({d[i].dst + d[i].count, i, false});
    }
    std::sort(events_.begin(), events_.end(),
              [](const event& a, const event& b) { return a.pos < b.pos; });
    heap_.clear();
    segs_.clear();
    std::uint64_t prev = events_.empty() ? 0 : events_.front().pos;
    for (std::size_t k = 0; k < events_.size();) {
      const std::uint64_t p = events_[k].pos;
      if (p > prev) {
        while (!heap_.empty() && d[heap_.front()].dst + d[heap_.front()].count <= prev) {
          std::pop_heap(heap_.begin(), heap_.end());
          heap_.pop_back();
        }
        if (!heap_.empty()) emit(prev, p, d[heap_.front()]);
      }
      for (; k < events_.size() && events_[k].pos == p; ++k) {
        if (events_[k].start) {
          heap_.push_back(events_[k].index);
          std::push_heap(heap_.begin(), heap_.end());
        }
      }
      prev = p;
    }
    out_.clear();
    for (const seg& s : segs_)
      for (std::uint64_t e = 0; e < s.len; e += per_chunk)
        out_.push_back({s.dst + e, s.src + e,
                        static_cast<std::uint32_t>(std::min<std::uint64_t>(per_chunk, s.len - e)), 0});
    return out_;
  }

 private:
  struct event {
    std::uint64_t pos;
    std::uint32_t index;
    bool start;
  };
  struct seg {
    std::uint64_t dst, src, len;
  };
  void emit(std::uint64_t a, std::uint64_t b, const chunk_desc& owner) {
    const std::uint64_t src = owner.src + (a - owner.dst);
    if (!segs_.empty()) {
      seg& last = segs_.back();
      if (last.dst + last.len == a && last.src + last.len == src) {
        last.len += b - a;
        return;
      }
    }
    segs_.push_back({a, src, b - a});
  }

  std::vector<std::uint32_t> order_;
  std::vector<event> events_;
  std::vector<std::uint32_t> heap_;
  std::vector<seg> segs_;
  std::vector<chunk_desc> out_;
};

}  // namespace ferry::detail
