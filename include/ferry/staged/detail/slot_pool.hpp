// ferry/staged/detail/slot_pool.hpp: the rotating staging slots of staged writes, a client of the
// reuse core (memory/detail/timeline.hpp).
//
// A slot is a pinned, mapped arena block (the host writes it, the apply reads it through UVA) plus,
// once an apply has used the H2D path, a device scratch of the block's content size. The slot
// being staged into is "current"; an apply hands it to a stream with the stamp the core gave that
// apply (reuse::event_fenced) and appends it to a FIFO of used slots. The next staging takes the
// newest of the last few used slots whose stamp has passed (warm in the host's caches), else the
// oldest that has; if none has, a fresh arena block (no blocking): a slot
// the GPU may still read is never rewritten. Scratch travels with its slot, so the same stamp
// guards it. Scratch comes from the owner's device resource when staging_memory names one
// (staging_memory.hpp says on which streams it is allocated and given back), else from ferry
// (cudaMallocAsync on the apply's stream, cudaMalloc in reserve). Fresh slots (reserve) are taken
// before used ones. reuse::caller_fenced stamps and checks nothing and cycles through `slots`
// slots: the slot of apply k is rewritten first by the batch of apply k + slots.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/error.hpp>
#include <ferry/detail/ring.hpp>
#include <ferry/memory/detail/timeline.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/resource.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/staged/staging_memory.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class B, growth_policy Growth, reuse_policy Reuse>
class slot_pool {
  using ops = backend_ops<B>;
  static constexpr bool caller_fenced = !Reuse::ferry_fences;
  static constexpr bool exact_scratch = Growth::stable_addresses;

 public:
  struct slot {
    pinned_block block{};
    std::byte* scratch = nullptr;
    std::size_t scratch_bytes = 0;
    stamp used{};  // the point after the last work that read the slot
    std::optional<stream_ref<B>> scratch_on{};  // the stream of the scratch's last apply
  };

  /// `slots` slots of `memory.arena` (scratch from `memory.device`, if any) for work on `device`.
  slot_pool(std::size_t slots, int device, const staging_memory<B>& memory)
      : slots_(slots), device_(device), arena_(memory.arena), resource_(memory.device) {
    if (slots == 0)
      throw std::invalid_argument("ferry: staged writes need at least one staging slot (slots == 0)");
    if (arena_ == nullptr)
      throw std::invalid_argument("ferry: staging_memory::arena is null: leave it out for "
                                  "default_arena(), or point it at an arena");
  }
  slot_pool(const slot_pool&) = delete;
  slot_pool& operator=(const slot_pool&) = delete;
  /// Waits for the stamps of every slot (destructors wait for their own fences), then gives the
  /// blocks back to the arena and frees the scratch. reuse::caller_fenced stamps nothing: once a
  /// slot has been handed to a stream, it waits for the whole device instead.
  ~slot_pool() {
    destructor_guard([&] {
      if constexpr (caller_fenced)
        if (handed_) ops::synchronize_device(device_);
      auto& core = shared_timeline<B>();
      core.wait(fill_);
      for (std::size_t i = 0; i < free_.size(); ++i) core.wait(free_[i].used);
      for (auto& r : retired_) core.wait(r.used);
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

  /// Makes a current slot of at least `bytes` bytes exist: the oldest used slot whose stamp has
  /// passed, else a fresh arena block. Throws (arena cap) with nothing changed.
  void acquire_current(std::size_t bytes) {
    if (has_) return;
    free_.reserve(owned_ + 1);
    if (const std::size_t k = reusable(); k < free_.size()) {
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
    cur_.used = {};
    has_ = true;
  }

  /// Swaps in a block of at least `bytes` for the current slot (which the GPU does not read) and
  /// returns the old one, which stays readable until finish_grow(old).
  [[nodiscard]] pinned_block begin_grow(std::size_t bytes) {
    pinned_block b = arena_->acquire(bytes);  // may throw: nothing changed
    return std::exchange(cur_.block, b);
  }
  void finish_grow(pinned_block old) noexcept { arena_->release(old); }

  /// The current slot's device scratch, grown to at least `bytes` (exactly that size under
  /// growth::fixed, else as the GrowthPolicy grows), allocated stream-ordered on `s` (the stream
  /// of the apply that is about to use it): cudaMalloc may wait for the device, which would block
  /// (or deadlock) behind a stream held by a long kernel or a host function. The current slot is
  /// not read by any work in flight (its stamp has passed, or it is fresh), so an outgrown scratch
  /// is freed stream-ordered on `s` at once. Either way from the device resource, if any.
  std::byte* scratch(std::size_t bytes, stream_ref<B> s) {
    if (cur_.scratch_bytes < bytes) {
      const std::size_t want = scratch_size(bytes);
      auto* p = static_cast<std::byte*>(
          resource_ ? allocate_device(*resource_, s, want, "the staged writes' device resource")
                    : ops::alloc_device_async(want, s));  // may throw: nothing changed
      if (cur_.scratch) {
        std::byte* old = std::exchange(cur_.scratch, nullptr);
        const std::size_t old_bytes = std::exchange(cur_.scratch_bytes, 0);
        try {
          if (resource_)
            resource_->deallocate(s, old, old_bytes, device_alignment);
          else
            ops::free_device_async(old, s);
        } catch (...) {
          cur_.scratch = p;  // keep the new one; the old one leaks rather than being freed unsafely
          cur_.scratch_bytes = want;
          cur_.scratch_on = s;
          throw;
        }
      }
      cur_.scratch = p;
      cur_.scratch_bytes = want;
    }
    cur_.scratch_on = s;
    return cur_.scratch;
  }

  /// The work that reads the current slot has been enqueued and is done once `done` has passed
  /// (empty when nothing was stamped: caller_fenced): the slot joins the used FIFO.
  void commit(stamp done) noexcept {
    if constexpr (caller_fenced) handed_ = true;
    cur_.used = done;
    free_.push_back(cur_);  // capacity reserved in acquire_current: no allocation, no throw
    cur_ = slot{};
    has_ = false;
  }
  /// The work that reads the current slot was enqueued but could not be stamped: the slot is
  /// abandoned (leaked, never rewritten under its reader).
  void abandon() noexcept {
    cur_ = slot{};
    has_ = false;
    --owned_;
  }

  /// Marks `s` after work on the owner's memory that is no slot use (the target's zero fill):
  /// the destructor waits for it.
  void note_fill(stream_ref<B> s) { fill_ = shared_timeline<B>().mark(s); }

  /// At least `slots` slots of at least `bytes` bytes (and `scratch_bytes` of scratch, when
  /// non-zero and the scratch is ferry's: a resource's is allocated in order on an apply's
  /// stream, at the slot's first copying apply), allocated now. Slots in flight that are too
  /// small are retired behind their stamps. New slots go before the used ones, which keep their
  /// order (and so their time to be read).
  void reserve(std::size_t bytes, std::size_t scratch_bytes) {
    const std::size_t want = scratch_size(scratch_bytes);  // may throw: no change
    free_.reserve(std::max(owned_, slots_) + 1);
    retired_.reserve(retired_.size() + free_.size() + 1);
    for (std::size_t i = 0; i < free_.size(); ++i) {
      slot& e = free_[i];
      if (e.block.capacity < bytes) {
        pinned_block b = arena_->acquire(bytes);
        retired_.push_back(slot{e.block, nullptr, 0, e.used});
        e.block = b;
      }
    }
    while (owned_ < slots_) {  // each new slot goes to the front
      free_.push_back(slot{arena_->acquire(bytes)});
      ++owned_;
      for (std::size_t i = 1; i < free_.size(); ++i) free_.push_back(free_.pop_front());
    }
    if (scratch_bytes == 0 || resource_) return;
    for (std::size_t i = 0; i < free_.size(); ++i) {
      slot& e = free_[i];
      if (e.scratch_bytes >= want) continue;
      retired_.reserve(retired_.size() + 1);
      auto* p = static_cast<std::byte*>(ops::alloc_device(want));
      if (e.scratch) retired_.push_back(slot{{}, e.scratch, e.scratch_bytes, e.used});
      e.scratch = p;
      e.scratch_bytes = want;
    }
    if (has_ && cur_.scratch_bytes < want) {
      retired_.reserve(retired_.size() + 1);
      auto* p = static_cast<std::byte*>(ops::alloc_device(want));
      if (cur_.scratch) retired_.push_back(slot{{}, cur_.scratch, cur_.scratch_bytes, stamp{}});
      cur_.scratch = p;
      cur_.scratch_bytes = want;
    }
  }

 private:
  // The used slot to take, free_.size() for none (a fresh slot then). Only once all `slots` slots
  // exist; caller_fenced: the oldest (the rotation); else the newest of the `warm` most recently
  // used slots whose stamp has passed (its contents are still in the host's caches: a deep ring
  // cycled oldest first writes every batch into cold memory), else the oldest that has passed.
  std::size_t reusable() {
    if (free_.empty() || owned_ < slots_) return free_.size();
    if constexpr (caller_fenced) {
      return 0;
    } else {
      constexpr std::size_t warm = 3;
      auto& core = shared_timeline<B>();
      for (std::size_t k = free_.size(); k-- > 0 && free_.size() - k <= warm;)
        if (core.passed(free_[k].used)) return k;
      std::size_t k = 0;
      while (k < free_.size() && !core.passed(free_[k].used)) ++k;
      return k;
    }
  }
  // Scratch of `bytes`: exactly (growth::fixed) or as the GrowthPolicy grows, at least 256.
  static std::size_t scratch_size(std::size_t bytes) {
    if constexpr (exact_scratch)
      return bytes;
    else
      return grown_capacity<Growth>(std::max<std::size_t>(bytes, 256), 0);
  }
  // Gives a slot's memory back once every use has passed: a resource's scratch on the stream of
  // its last use (set whenever it exists), ferry's with cudaFree.
  void drop(const slot& s) noexcept {
    if (s.block) arena_->release(s.block);
    if (!s.scratch) return;
    if (resource_)
      destructor_guard([&] {
        resource_->deallocate(*s.scratch_on, s.scratch, s.scratch_bytes, device_alignment);
      });
    else
      ops::free_device(s.scratch);
  }

  std::size_t slots_;
  int device_;
  pinned_arena<B>* arena_;
  std::optional<device_resource_ref<B>> resource_;  // the scratch's, if not ferry's
  ring<slot> free_;              // used slots, oldest first, each behind its stamp
  std::vector<slot> retired_;    // outgrown blocks/scratch still behind a stamp (freed at the end)
  stamp fill_{};                 // the target's zero fill
  slot cur_{};
  bool has_ = false;
  std::size_t owned_ = 0;        // slots in free_ plus the current one
  bool handed_ = false;          // caller_fenced: a slot has been handed to a stream
};

}  // namespace ferry::detail
