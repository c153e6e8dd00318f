// ferry/staged/detail/slot_pool.hpp: the rotating, fenced staging slots of staged writes.
//
// A slot is a pinned, mapped arena block (the host writes it, the apply kernel reads it through
// UVA) plus, once an apply has used the H2D path, a device scratch of the block's content size.
// The slot being staged into is "current"; apply_write hands it to the stream, fences it
// (reuse::event_fenced) and appends it to a FIFO of used slots. The next staging takes the oldest
// used slot only if its fence has passed; otherwise a fresh arena block (no blocking): a slot the
// GPU may still read is never rewritten. Scratch travels with its slot, so the same fence guards
// it (no cross-stream hazard on scratch either). Fresh slots (reserve) are taken before used ones.
//
// Cost (cudaEventQuery is about 1.5 us on the H200): a fence is checked against the clock's
// watermark first (free). Only when the oldest slot is not known passed does the pool ask the
// backend, and then about one fence chosen so that one answer frees many slots: the newest (when
// the GPU keeps up, one query retires the whole FIFO) or, in a FIFO of three or more, the middle
// one (when the host runs ahead, one query frees half of it, and a failed answer grows the FIFO
// instead of being repeated). reuse::caller_fenced records and checks nothing and cycles through
// `slots` slots: the slot of apply k is rewritten first by the batch of apply k + slots.
//
// After a large batch (at least `hot_batch_bytes` of contents) the pool takes the most recently
// used slot whose fence has passed instead of the oldest: rewriting the slot written last keeps
// the host's copies in its caches, where cycling large batches through every slot of a deep pool
// runs them at DRAM speed (host time 2.3-2.6x its floor on the H200's host for 1-4 MiB applies
// through 8 slots, 1.03x after). A batch that large is worth one fence query.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/fence_clock.hpp>
#include <ferry/error.hpp>
#include <ferry/detail/ring.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/policies/growth.hpp>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

namespace ferry::detail {

/// Contents per batch from which staging prefers the slot written last (see the file comment).
inline constexpr std::size_t hot_batch_bytes = 64 * 1024;

template <class B, bool CallerFenced>
class slot_pool {
  using ops = backend_ops<B>;

 public:
  struct slot {
    pinned_block block{};
    std::byte* scratch = nullptr;
    std::size_t scratch_bytes = 0;
    fence f{};
  };

  /// `slots` slots of `arena` for work on `device`.
  slot_pool(std::size_t slots, int device, pinned_arena<B>& arena)
      : slots_(slots), device_(device), arena_(&arena) {
    if (slots == 0)
      throw std::invalid_argument("ferry: staged writes need at least one staging slot (slots == 0)");
  }
  slot_pool(const slot_pool&) = delete;
  slot_pool& operator=(const slot_pool&) = delete;
  /// Waits for the fences of every slot (destructors wait for their own fences), then gives the
  /// blocks back to the arena and frees the scratch. reuse::caller_fenced records no fences: once
  /// a slot has been handed to a stream, it waits for the whole device instead.
  ~slot_pool() {
    destructor_guard([&] {
      if constexpr (CallerFenced)
        if (handed_) ops::synchronize_device(device_);
      for (std::size_t i = 0; i < free_.size(); ++i) clock_.wait(free_[i].f);
      for (auto& r : retired_) clock_.wait(r.f);
      for (auto& f : uses_) clock_.wait(f);
    });
    destructor_guard([&] {
      while (!free_.empty()) drop(free_.pop_front());
      if (has_) drop(std::exchange(cur_, slot{}));
      for (auto& r : retired_) drop(r);
      retired_.clear();
    });
  }

  [[nodiscard]] bool has_current() const noexcept { return has_; }
  [[nodiscard]] slot& current() noexcept { return cur_; }
  [[nodiscard]] std::size_t owned() const noexcept { return owned_; }

  /// Makes a current slot of at least `bytes` bytes exist: the oldest used slot when its fence
  /// has passed, else a fresh arena block. Throws (arena cap) with nothing changed.
  void acquire_current(std::size_t bytes) {
    if (has_) return;
    free_.reserve(owned_ + 1);
    retired_.reserve(retired_.size() + 1);
    std::size_t k = 0;
    if (!free_.empty() && (recent_passed(k) || (owned_ >= slots_ && front_passed()))) {
      if (free_[k].block.capacity < bytes) {
        pinned_block b = arena_->acquire(bytes);  // may throw: nothing changed
        slot old = free_.take(k);
        arena_->release(old.block);  // passed: reusable at once
        old.block = b;               // the scratch (sized by content, checked at use) stays
        cur_ = old;
      } else {
        cur_ = free_.take(k);
      }
    } else {
      cur_ = slot{arena_->acquire(bytes)};  // may throw: nothing changed
      ++owned_;
    }
    cur_.f = {};
    has_ = true;
  }

  /// Swaps in a block of at least `bytes` for the current slot (which the GPU does not read) and
  /// returns the old one, which stays readable until finish_grow(old).
  [[nodiscard]] pinned_block begin_grow(std::size_t bytes) {
    pinned_block b = arena_->acquire(bytes);  // may throw: nothing changed
    return std::exchange(cur_.block, b);
  }
  void finish_grow(pinned_block old) noexcept { arena_->release(old); }

  /// The current slot's device scratch, grown to at least `bytes` (`exact`: to exactly that size,
  /// for growth::fixed; else the next power of two), allocated stream-ordered on `s` (the stream
  /// of the apply that is about to use it): cudaMalloc may wait for the device, which would block
  /// (or deadlock) behind a stream held by a long kernel or a host function. The current slot is
  /// not read by any work in flight (its fence has passed, or it is fresh), so an outgrown scratch
  /// is freed stream-ordered on `s` at once.
  std::byte* scratch(std::size_t bytes, bool exact, stream_ref<B> s) {
    if (cur_.scratch_bytes >= bytes) return cur_.scratch;
    const std::size_t want = scratch_size(bytes, exact);
    auto* p = static_cast<std::byte*>(ops::alloc_device_async(want, s));
    if (cur_.scratch) {
      std::byte* old = std::exchange(cur_.scratch, nullptr);
      cur_.scratch_bytes = 0;
      try {
        ops::free_device_async(old, s);
      } catch (...) {
        cur_.scratch = p;  // keep the new one; the old one leaks rather than being freed unsafely
        cur_.scratch_bytes = want;
        throw;
      }
    }
    cur_.scratch = p;
    cur_.scratch_bytes = want;
    return p;
  }

  /// The launch that reads the current slot (`content_bytes` of contents) has been enqueued on
  /// `s`: fence the slot and append it to the used FIFO. If the fence cannot be recorded, the
  /// slot is abandoned (leaked, never reused under a reader) and the error rethrown.
  void commit(stream_ref<B> s, std::size_t content_bytes) {
    hot_ = content_bytes >= hot_batch_bytes;
    if constexpr (CallerFenced) {
      handed_ = true;
    } else {
      try {
        cur_.f = clock_.record(s);
      } catch (...) {
        cur_ = slot{};
        has_ = false;
        --owned_;
        throw;
      }
    }
    free_.push_back(cur_);  // capacity reserved in acquire_current: no allocation, no throw
    cur_ = slot{};
    has_ = false;
  }

  /// Records a fence on `s` that the destructor waits for (work on the owner's memory that is not
  /// a slot use, e.g. the target's zero fill).
  void note_use(stream_ref<B> s) {
    if (uses_.size() >= 8) {
      std::size_t k = 0;
      for (auto& f : uses_)
        if (!clock_.known(f)) uses_[k++] = f;
      uses_.resize(k);
    }
    uses_.push_back(clock_.record(s));
  }

  /// At least `slots` slots of at least `bytes` bytes (and `scratch_bytes` of scratch, when
  /// non-zero), allocated now. Slots in flight that are too small are retired behind their fences.
  /// New slots go before the used ones, which keep their order (and so their time to be read).
  void reserve(std::size_t bytes, std::size_t scratch_bytes, bool exact_scratch) {
    const std::size_t want = scratch_size(scratch_bytes, exact_scratch);  // may throw: no change
    free_.reserve(std::max(owned_, slots_) + 1);
    retired_.reserve(retired_.size() + free_.size() + 1);
    for (std::size_t i = 0; i < free_.size(); ++i) {
      slot& e = free_[i];
      if (e.block.capacity < bytes) {
        pinned_block b = arena_->acquire(bytes);
        retired_.push_back(slot{e.block, nullptr, 0, e.f});
        e.block = b;
      }
    }
    while (owned_ < slots_) {  // each new slot goes to the front
      free_.push_back(slot{arena_->acquire(bytes)});
      ++owned_;
      for (std::size_t i = 1; i < free_.size(); ++i) free_.push_back(free_.pop_front());
    }
    if (scratch_bytes == 0) return;
    for (std::size_t i = 0; i < free_.size(); ++i) {
      slot& e = free_[i];
      if (e.scratch_bytes >= want) continue;
      retired_.reserve(retired_.size() + 1);
      auto* p = static_cast<std::byte*>(ops::alloc_device(want));
      if (e.scratch) retired_.push_back(slot{{}, e.scratch, e.scratch_bytes, e.f});
      e.scratch = p;
      e.scratch_bytes = want;
    }
    if (has_ && cur_.scratch_bytes < want) {
      retired_.reserve(retired_.size() + 1);
      auto* p = static_cast<std::byte*>(ops::alloc_device(want));
      if (cur_.scratch) retired_.push_back(slot{{}, cur_.scratch, cur_.scratch_bytes, fence{}});
      cur_.scratch = p;
      cur_.scratch_bytes = want;
    }
  }

 private:
  // After a large batch: is the most recently used slot whose fence has passed one of the two
  // newest? The newest is taken if known passed (no query); else the one before it is asked about
  // (its apply was enqueued a whole batch ago, so it has usually run).
  bool recent_passed(std::size_t& k) {
    if constexpr (CallerFenced) {
      return false;
    } else {
      if (!hot_) return false;
      const std::size_t n = free_.size();
      if (clock_.known(free_[n - 1].f)) {
        k = n - 1;
        return true;
      }
      if (n < 2 || !clock_.query(free_[n - 2].f)) return false;
      k = n - 2;
      return true;
    }
  }
  // Is the oldest used slot free to rewrite? (See the file comment for which fence is asked.)
  bool front_passed() {
    if constexpr (CallerFenced) {
      return true;
    } else {
      const fence f = free_.front().f;
      if (clock_.known(f)) return true;
      const std::size_t n = free_.size();
      // One answer about a later fence frees many slots; only when it fails is the front itself
      // asked (one more query is far cheaper than growing the pool: cudaHostAlloc ~0.7 ms).
      const fence probe = n >= 3 ? free_[(n - 1) / 2].f : free_[n - 1].f;
      if (clock_.query(probe)) {
        if (clock_.known(f)) return true;  // same stream: fences pass in order
      } else if (n == 1) {
        return false;  // the probe was the front itself
      }
      return clock_.query(f);
    }
  }
  // Scratch of `bytes`: exactly (growth::fixed) or the next power of two, at least 256.
  static std::size_t scratch_size(std::size_t bytes, bool exact) {
    return exact ? bytes : growth::pow2::capacity_for(std::max<std::size_t>(bytes, 256));
  }
  void drop(const slot& s) noexcept {
    if (s.block) arena_->release(s.block);
    if (s.scratch) ops::free_device(s.scratch);
  }

  std::size_t slots_;
  int device_;
  pinned_arena<B>* arena_;
  fence_clock<B> clock_;
  ring<slot> free_;              // used slots, oldest first, each behind its fence
  std::vector<slot> retired_;    // outgrown blocks/scratch still behind a fence (freed at the end)
  std::vector<fence> uses_;
  slot cur_{};
  bool has_ = false;
  std::size_t owned_ = 0;        // slots in free_ plus the current one
  bool hot_ = false;             // the last batch had at least hot_batch_bytes of contents
  bool handed_ = false;          // caller_fenced: a slot has been handed to a stream
};

}  // namespace ferry::detail
