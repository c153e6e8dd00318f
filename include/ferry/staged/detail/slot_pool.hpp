// ferry/staged/detail/slot_pool.hpp: the rotating staging slots of staged writes (on the slot
// ring, memory/slot_ring.hpp) and their device scratch.
//
// A slot is a pinned, mapped arena block (the host writes it, the apply reads it through UVA).
// The slot being staged into is "current"; an apply hands it to a stream with the stamp the core
// gave that apply (reuse::event_fenced), and the slot goes back into the ring. The next staging
// takes the warmest free slot (the warm-reuse rule: the newest of the last few used slots whose
// stamp has passed, the one just applied included, else the oldest that has); if none has, a
// fresh arena block is inserted (no blocking, no ceiling): a slot the GPU may still read is never
// rewritten. Fresh slots (reserve) are taken before used ones. reuse::caller_fenced checks nothing
// and cycles through `slots` slots: the slot of apply k is rewritten first by the batch of apply
// k + slots.
//
// Device scratch (the H2D path) belongs to a stream, not to a slot: an apply copies into the
// scratch of its stream, and stream order alone keeps the next apply's copy behind the last
// one's read, so one scratch serves every apply on a stream (one destination that stays in the
// device's caches, one allocation). A stream without scratch takes over one whose last apply has
// passed (caller_fenced: `slots` applies ago), else allocates its own. Scratch comes from the
// owner's device resource when staging_memory names one (staging_memory.hpp says on which streams
// it is allocated and given back), else from ferry (cudaMallocAsync on the apply's stream,
// cudaMalloc in reserve).
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/resource.hpp>
#include <ferry/memory/slot_ring.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/staged/staging_memory.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class B, growth_policy Growth, reuse_policy Reuse>
class slot_pool {
  using ops = backend_ops<B>;
  static constexpr bool exact_scratch = Growth::stable_addresses;

 public:
  struct slot {
    pinned_block block{};
  };

 private:
  using ring_type = slot_ring<B, Reuse, slot>;

 public:
  /// `slots` slots of `memory.arena` (scratch from `memory.device`, if any) for work on `device`.
  slot_pool(std::size_t slots, int device, const staging_memory<B>& memory)
      : slots_(slots), device_(device), arena_(memory.arena), resource_(memory.device),
        ring_(ring_order::warmest, static_cast<std::size_t>(-1), slots) {
    if (slots == 0)
      throw std::invalid_argument("ferry: staged writes need at least one staging slot (slots == 0)");
    if (arena_ == nullptr)
      throw std::invalid_argument("ferry: staging_memory::arena is null: leave it out for "
                                  "default_arena(), or point it at an arena");
  }
  slot_pool(const slot_pool&) = delete;
  slot_pool& operator=(const slot_pool&) = delete;
  /// Gives the blocks back to the arena and frees the scratch once their stamps have passed
  /// (slot_ring::release, which first synchronizes the device when a slot was handed to a stream
  /// with no stamp: reuse::caller_fenced). All the waits together end at one bound (the
  /// ReusePolicy's, else ferry::wait_timeout()); what the stream may still read past it is leaked,
  /// never given back (ferry::swallowed_errors()).
  ~slot_pool() {
    (void)ring_.release(device_, [&](slot& s) { arena_->release(s.block); }, [&](wait_deadline& d) {
      (void)passed_by<B>(fill_, d);  // the target's zero fill: its memory goes in stream order, or after it
      for (auto& r : retired_)
        if (r.stamps.template all_passed_by<B>(d)) destructor_guard([&] { arena_->release(r.block); });
      for (auto& e : scratch_)
        if (!e.pending && passed_by<B>(e.used, d)) free_scratch(e);  // a pending one's copy may still run
      for (auto& e : retired_scratch_)
        if (passed_by<B>(e.used, d)) free_scratch(e);
    });
  }

  [[nodiscard]] bool has_current() const noexcept { return has_; }
  [[nodiscard]] slot& current() noexcept { return *cur_; }
  [[nodiscard]] std::size_t owned() const noexcept { return ring_.size(); }

  /// Makes a current slot of at least `bytes` bytes exist (slot_ring::acquire): the warmest free
  /// slot once all `slots` exist, else a fresh arena block inserted into the ring. Throws (arena
  /// cap) with nothing changed.
  void acquire_current(std::size_t bytes) {
    if (has_) return;
    claim c{*this, bytes};
    cur_ = &ring_[ring_.acquire(c)];
    has_ = true;
  }

  /// Swaps in a block of at least `bytes` for the current slot (which the GPU does not read) and
  /// returns the old one, which stays readable until finish_grow(old).
  [[nodiscard]] pinned_block begin_grow(std::size_t bytes) {
    pinned_block b = arena_->acquire(bytes);  // may throw: nothing changed
    return std::exchange(cur_->block, b);
  }
  void finish_grow(pinned_block old) noexcept { arena_->release(old); }

  /// An apply begins. A scratch taken by an earlier apply that failed before commit or abandon
  /// stays pending (its stream's order guards it; no other stream takes it over) but is not this
  /// apply's to stamp.
  void begin_apply() noexcept { current_scratch_ = no_scratch; }

  /// The device scratch of the apply about to run on `s`, grown to at least `bytes` (exactly that
  /// size under growth::fixed, else as the GrowthPolicy grows): `s`'s own, else one taken over
  /// (its last apply has passed), else a new one. Allocated and freed stream-ordered on `s`:
  /// cudaMalloc may wait for the device, which would block (or deadlock) behind a stream held by
  /// a long kernel or a host function; nothing but `s`'s earlier work can still use an outgrown
  /// scratch. Either way from the device resource, if any. Throws with nothing changed.
  std::byte* scratch(std::size_t bytes, stream_ref<B> s) {
    const std::uint64_t key = ops::stream_key(s);
    scratch_.reserve(scratch_.size() + 1);  // may throw: nothing changed
    std::size_t k = 0;
    while (k < scratch_.size() && scratch_[k].key != key) ++k;
    if (k == scratch_.size()) k = takeover();
    if (k == scratch_.size()) scratch_.push_back(scratch_entry{});  // reserved: no throw
    scratch_entry& e = scratch_[k];
    if (e.bytes < bytes) {
      const std::size_t want = scratch_size(bytes);
      auto* p = static_cast<std::byte*>(
          resource_ ? allocate_device(*resource_, s, want, "the staged writes' device resource")
                    : ops::alloc_device_async(want, s));  // may throw: nothing changed
      if (e.data) {
        try {
          if (resource_)
            resource_->deallocate(s, e.data, e.bytes, device_alignment);
          else
            ops::free_device_async(e.data, s);
        } catch (...) {
          e.data = p;  // keep the new one; the old one leaks rather than being freed unsafely
          e.bytes = want;
          e.on = s;
          throw;
        }
      }
      e.data = p;
      e.bytes = want;
    }
    e.key = key;
    e.on = s;
    e.pending = true;  // until commit stamps the apply: no other stream takes it over
    current_scratch_ = k;
    return e.data;
  }

  /// The work that reads the current slot (and the scratch the apply took, if any) has been
  /// enqueued and is done once `done` has passed (empty when nothing was stamped: caller_fenced):
  /// the slot goes back into the ring, closed (a candidate again once `done` has passed).
  void commit(stamp done) noexcept {
    ring_.commit(done, after_use::closed);  // a candidate again once `done` has passed
    if (current_scratch_ < scratch_.size()) {
      scratch_entry& e = scratch_[std::exchange(current_scratch_, no_scratch)];
      e.used = done;
      e.apply = ring_.uses();
      e.pending = false;
    }
    cur_ = nullptr;
    has_ = false;
  }
  /// The work that reads the current slot was enqueued but could not be stamped: the slot is
  /// abandoned (leaked, never rewritten under its reader); the scratch stays its stream's, whose
  /// order still guards it, and is never taken over.
  void abandon() noexcept {
    current_scratch_ = no_scratch;
    ring_.abandon();
    cur_ = nullptr;
    has_ = false;
  }

  /// Marks `s` after work on the owner's memory that is no slot use (the target's zero fill):
  /// the destructor waits for it.
  void note_fill(stream_ref<B> s) { fill_ = shared_timeline<B>().mark(s); }

  /// At least `slots` slots of at least `bytes` bytes, and, when `scratch_bytes` is non-zero and
  /// the scratch is ferry's, every scratch of at least that size (one, unclaimed, if none exists
  /// yet: the first stream to apply takes it), allocated now (a resource's is allocated in order
  /// on an apply's stream, at that stream's first copying apply). Slots and scratch in flight
  /// that are too small are retired behind their stamps. New slots are taken before the used ones,
  /// which keep their order (and so their time to be read).
  void reserve(std::size_t bytes, std::size_t scratch_bytes) {
    const std::size_t want = scratch_size(scratch_bytes);  // may throw: no change
    const std::size_t current = has_ ? ring_.current() : ring_type::npos;
    ring_.reserve(std::max(ring_.size(), slots_) + 1);
    if (has_) cur_ = &ring_[current];  // the reserve may have moved the slots; a throw below keeps it valid
    retired_.reserve(retired_.size() + ring_.size());
    for (std::size_t i = 0; i < ring_.size(); ++i) {
      if (i == current || ring_[i].block.capacity >= bytes) continue;
      slot_stamps behind = ring_.stamps(i);
      const pinned_block b = arena_->acquire(bytes);
      retired_.push_back({ring_[i].block, std::move(behind)});  // room reserved: no throw
      ring_[i].block = b;
    }
    while (ring_.size() < slots_) ring_.push_back(slot{arena_->acquire(bytes)});  // fresh: taken first
    if (scratch_bytes == 0 || resource_) return;
    if (scratch_.empty()) {
      scratch_.reserve(1);
      scratch_.push_back(scratch_entry{static_cast<std::byte*>(ops::alloc_device(want)), want});
      return;
    }
    retired_scratch_.reserve(retired_scratch_.size() + scratch_.size());
    for (auto& e : scratch_) {
      if (e.bytes >= want) continue;
      auto* p = static_cast<std::byte*>(ops::alloc_device(want));
      if (e.data && !e.pending) retired_scratch_.push_back(e);  // behind its stamp
      e.data = p;  // a pending one's old scratch leaks: its copy may still run
      e.bytes = want;
      e.pending = false;
    }
  }

 private:
  // What a staging asks of the ring (slot_ring::acquire's hooks): a slot of `bytes` bytes. The
  // ring never fills (no ceiling): describe() is never asked for.
  struct claim {
    slot_pool& pool;
    std::size_t bytes;
    slot make() { return slot{pool.arena_->acquire(bytes)}; }
    void fit(slot& s) {
      if (s.block.capacity >= bytes) return;
      const pinned_block b = pool.arena_->acquire(bytes);        // may throw: nothing changed
      pool.arena_->release(std::exchange(s.block, b));  // passed: reusable at once
    }
    std::string describe(std::size_t) const { return "ferry: staged writes: no staging slot is free"; }
  };
  struct scratch_entry {
    std::byte* data = nullptr;
    std::size_t bytes = 0;
    std::uint64_t key = 0;  // the stream whose applies use it (ops::stream_key); 0: none yet
    std::optional<stream_ref<B>> on{};  // the stream of its last use (a resource frees on it)
    stamp used{};           // the point after its last apply
    std::uint64_t apply = 0;  // the ring's uses() after its last apply (caller_fenced's rotation)
    bool pending = false;   // handed to an apply that has not been stamped
  };
  static constexpr std::size_t no_scratch = static_cast<std::size_t>(-1);

  // A scratch no stream holds (reserve's), else one whose last apply has passed (caller_fenced:
  // `slots` applies ago, the rotation's promise); scratch_.size() for none.
  std::size_t takeover() {
    for (std::size_t k = 0; k < scratch_.size(); ++k)
      if (scratch_[k].key == 0) return k;
    for (std::size_t k = 0; k < scratch_.size(); ++k)
      if (!scratch_[k].pending && ring_.passed(scratch_[k].used, scratch_[k].apply)) return k;
    return scratch_.size();
  }
  // Scratch of `bytes`: exactly (growth::fixed) or as the GrowthPolicy grows, at least
  // scratch_min_bytes.
  static std::size_t scratch_size(std::size_t bytes) {
    if constexpr (exact_scratch)
      return bytes;
    else
      return grown_capacity<Growth>(std::max<std::size_t>(bytes, scratch_min_bytes), 0);
  }
  // Gives a scratch back once every use has passed: a resource's on the stream of its last use
  // (set whenever it exists), ferry's with cudaFree.
  void free_scratch(const scratch_entry& e) noexcept {
    if (!e.data) return;
    if (resource_)
      destructor_guard([&] { resource_->deallocate(*e.on, e.data, e.bytes, device_alignment); });
    else
      ops::free_device(e.data);
  }

  std::size_t slots_;
  int device_;
  pinned_arena<B>* arena_;
  std::optional<device_resource_ref<B>> resource_;  // the scratch's, if not ferry's
  // An outgrown block still behind its slot's stamps (freed at the end).
  struct retired_block {
    pinned_block block;
    slot_stamps stamps;
  };
  ring_type ring_;                     // the slots; its current one is being staged into
  std::vector<retired_block> retired_;
  std::vector<scratch_entry> scratch_;          // a scratch per stream that has applied
  std::vector<scratch_entry> retired_scratch_;  // outgrown in reserve, behind a stamp
  std::size_t current_scratch_ = no_scratch;    // the entry the apply in progress took
  stamp fill_{};                    // the target's zero fill
  slot* cur_ = nullptr;             // the ring's current slot while has_ (the hot path's one load)
  bool has_ = false;
};

}  // namespace ferry::detail
