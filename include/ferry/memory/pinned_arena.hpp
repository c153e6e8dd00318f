// ferry/memory/pinned_arena.hpp: pinned_arena<B>, the pool of pinned staging blocks, and
// default_arena<B>().
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/detail/ring.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/detail/warm_reuse.hpp>
#include <ferry/memory/resource.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

/// What an arena holds and has done.
struct arena_stats {
  std::uint64_t allocations = 0;  ///< blocks allocated (from the upstream resource, else cudaHostAlloc)
  std::uint64_t reuses = 0;       ///< blocks handed out again without an allocation
  std::size_t bytes_reserved = 0; ///< pinned bytes held, in use or free
  std::size_t bytes_in_use = 0;   ///< bytes of blocks handed out and not yet given back
  std::size_t byte_cap = 0;       ///< the cap on bytes_reserved
};

/// A block of pinned, mapped staging memory handed out by an arena: at least 256-byte aligned,
/// `capacity` bytes (a power of two, at least 256).
struct pinned_block {
  std::byte* data = nullptr;  ///< The block's first byte (null: no block).
  std::size_t capacity = 0;   ///< The block's size in bytes.
  /// True when this names a block.
  [[nodiscard]] explicit operator bool() const noexcept { return data != nullptr; }
};

/// Pinned staging memory for asynchronous copies and UVA reads. Blocks come in power-of-two size
/// classes; a block is given back with the stream it was used on, and handed out again only once
/// that stream has passed the point of use (a stamp of the reuse core, backend/detail/timeline.hpp,
/// made at release()). Of the blocks known to have passed, the one given back last is handed out
/// first: it is still in the host's caches, where a class cycled oldest first would copy every
/// upload into cold memory. Blocks are never returned to the backend except by trim() or the
/// destructor, so after warm-up (or reserve()) staging allocates nothing. Beyond `byte_cap`
/// reserved bytes, acquire() throws ferry::capacity_error instead of allocating — and still never
/// hands out a block in flight.
/// New blocks come from the backend (CUDA: cudaHostAlloc, mapped and portable; host: aligned host
/// memory) or, when the arena is made with one, from an upstream pinned_resource_ref (an engine's
/// own pool: see pinned_memory_resource for what its memory must be). Thread-safe.
template <class B = default_backend>
class pinned_arena {
  static_assert((detail::check_backend<B>(), true));
  using ops = detail::backend_ops<B>;

 public:
  using backend_type = B;  ///< The backend.
  /// The byte cap of an arena without one.
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();
  /// The smallest block (and the alignment of every block), in bytes.
  static constexpr std::size_t min_block = 256;

  /// An empty arena that will hold at most `byte_cap` pinned bytes.
  explicit pinned_arena(std::size_t byte_cap = unlimited) : cap_(byte_cap) {}
  /// An empty arena whose new blocks come from `upstream` (allocate_sync(size, min_block), called
  /// under the arena's lock: the resource must not call back into the arena) and go back to it
  /// (deallocate_sync with the same size and alignment) on trim() and destruction, each once
  /// ferry's fences have passed its last use. The resource must outlive the arena. A block that
  /// is not 256-byte aligned, or on CUDA not pinned and mapped at its own address, is given back at
  /// once and ferry::error thrown; a null block or std::bad_alloc is ferry::out_of_memory. Either
  /// way the arena is unchanged. The backend's counters (ferry::backend_stats_of, host_sync_guard)
  /// do not count the resource's allocations; stats().allocations does.
  explicit pinned_arena(pinned_resource_ref upstream, std::size_t byte_cap = unlimited)
      : cap_(byte_cap), upstream_(upstream) {}
  pinned_arena(const pinned_arena&) = delete;
  pinned_arena& operator=(const pinned_arena&) = delete;
  /// Waits for the stamps of the blocks it holds, then frees them (or gives them back to the
  /// upstream resource). Blocks still handed out are the holder's bug; they are leaked, not freed
  /// under a reader, and so are blocks whose stamps have not passed within the process-wide wait
  /// bound (ferry::wait_timeout; counted in ferry::swallowed_errors()).
  ~pinned_arena() {
    detail::destructor_guard([&] {
      std::lock_guard lock(mutex_);
      detail::wait_deadline d = detail::destructor_deadline();
      if (!pass_in_flight(d)) detail::count_swallowed_error();  // the rest is leaked
      free_passed();
    });
  }

  /// A block of at least `bytes` bytes whose previous use (if any) the GPU has passed.
  [[nodiscard]] pinned_block acquire(std::size_t bytes) {
    const unsigned cls = class_of(bytes);
    const std::size_t size = std::size_t{1} << cls;
    std::lock_guard lock(mutex_);
    if (auto b = take_passed(classes_[cls], size); b) {
      ++stats_.reuses;
      stats_.bytes_in_use += size;
      return b;
    }
    if (stats_.bytes_reserved + size > cap_)
      throw capacity_error("ferry: pinned_arena cap of " + std::to_string(cap_) +
                           " bytes reached (" + std::to_string(stats_.bytes_reserved) +
                           " reserved, " + std::to_string(stats_.bytes_in_use) +
                           " in use) while staging " + std::to_string(bytes) +
                           " bytes; blocks still in flight are never reused");
    pinned_block b = add_block(classes_[cls], size);
    stats_.bytes_in_use += size;
    return b;
  }

  /// Gives `b` back; it is reused only after `s` has passed everything enqueued on it so far.
  void release(pinned_block b, stream_ref<B> s) {
    if (!b) return;
    // Marked before locking: the arena's lock is never held around the core's.
    const detail::stamp at = detail::shared_timeline<B>().mark(s);
    std::lock_guard lock(mutex_);
    give_back(b, at);
  }
  /// Gives back a block that no stream used (reusable at once).
  void release(pinned_block b) {
    if (!b) return;
    std::lock_guard lock(mutex_);
    give_back(b, detail::stamp{});
  }

  /// Makes sure at least `count` blocks of at least `bytes` bytes are free, allocating the
  /// difference now (so that steady state starts allocation-free).
  void reserve(std::size_t bytes, std::size_t count = 1) {
    const unsigned cls = class_of(bytes);
    const std::size_t size = std::size_t{1} << cls;
    std::lock_guard lock(mutex_);
    auto& c = classes_[cls];
    while (c.in_flight.size() + c.passed.size() < count) {
      if (stats_.bytes_reserved + size > cap_)
        throw capacity_error("ferry: pinned_arena::reserve exceeds the arena's byte cap of " +
                             std::to_string(cap_));
      c.passed.push_back(add_block(c, size));  // room reserved by add_block: cannot throw
    }
  }

  /// Frees every block not handed out (or gives it back to the upstream resource), after waiting
  /// for its stamp. Synchronizing: the wait, and on CUDA cudaFreeHost itself, which waits for the
  /// whole device. A block whose stamp has not passed within the process-wide wait bound
  /// (ferry::wait_timeout): ferry::timeout_error naming its stream point, and nothing is freed.
  void trim() {
    std::lock_guard lock(mutex_);
    detail::wait_deadline d;
    detail::stamp held{};
    if (!pass_in_flight(d, &held))
      throw timeout_error("ferry: pinned_arena::trim: the wait for a block's " + detail::point_name(held) + " " +
                          detail::timeout_text(d) + "; nothing was freed");
    free_passed();
  }

  /// The resource new blocks come from; empty: the backend's own pinned allocation.
  [[nodiscard]] std::optional<pinned_resource_ref> upstream() const noexcept { return upstream_; }

  /// What the arena holds and has done.
  [[nodiscard]] arena_stats stats() const {
    std::lock_guard lock(mutex_);
    auto s = stats_;
    s.byte_cap = cap_;
    return s;
  }

 private:
  // Moves the blocks in flight whose stamps pass before `d` expires to the passed ones (what
  // nobody sees: the blocks stay free and held), each class in the order given back; false when a
  // block's stamp did not (`held`: the first such stamp).
  bool pass_in_flight(detail::wait_deadline& d, detail::stamp* held = nullptr) {
    auto& core = detail::shared_timeline<B>();
    bool all = true;
    for (auto& c : classes_) {
      while (!c.in_flight.empty()) {
        const detail::stamp at = c.in_flight.front().at;
        if (core.wait_until(at, d) == detail::wait_result::timed_out) {
          if (all && held) *held = at;
          all = false;
          break;
        }
        c.passed.push_back(c.in_flight.pop_front().block);
      }
    }
    return all;
  }
  // Frees every block known passed (trim, destruction).
  void free_passed() {
    for (auto& c : classes_) {
      while (!c.passed.empty()) {
        const pinned_block b = c.passed.back();
        c.passed.pop_back();
        --c.blocks;
        stats_.bytes_reserved -= b.capacity;
        free_block(b);
      }
    }
  }

  /// The staging memory a class cycles through while the GPU keeps up, so that it stays in the
  /// host's caches (detail/tuning.hpp; docs/memory.md, "The pinned staging arena").
  static constexpr std::size_t warm_bytes = detail::arena_warm_bytes;

  struct entry {
    pinned_block block;
    detail::stamp at;  // where the block's last use ends
  };
  /// The free blocks of one size class: those given back behind a stamp not yet known passed, in
  /// the order given back, and those known passed, the one given back last on top. Both have room
  /// for every block of the class, so giving a block back never allocates.
  struct size_class {
    detail::ring<entry> in_flight;
    std::vector<pinned_block> passed;
    std::size_t blocks = 0;   // of this class, free or handed out
    std::size_t unasked = 0;  // given back in flight since the core was last asked about them
  };

  static unsigned class_of(std::size_t bytes) {
    const std::size_t n = bytes < min_block ? min_block : bytes;
    if (n > (std::size_t{1} << 62)) throw capacity_error("ferry: staging request too large");
    return static_cast<unsigned>(std::bit_width(n - 1));
  }

  // A free block of the class whose stamp has passed: the blocks at the front of the in-flight
  // FIFO that the core already knows passed join the passed ones (compares, no backend call), and
  // the warmest of those is taken. Each time another warm_bytes of blocks has been given back
  // unasked, the core is asked about the oldest (one answer, newest first, retires them all), so
  // that the class keeps cycling through memory still in the host's caches rather than through
  // every block it holds. With no block known passed, the warm-reuse rule (take_warmest, as the
  // slot ring) picks among those in flight: the newest of the warm_slots given back last that the
  // core knows passed (a compare each: the newest are the least likely to have passed, so they
  // cost no backend query), else the oldest that has passed (the core answers a scan over blocks
  // of a stream still in flight with one backend query per stream), else one of the warm ones
  // that has passed after all.
  pinned_block take_passed(size_class& c, std::size_t size) {
    auto& core = detail::shared_timeline<B>();
    const auto take_known = [&] {
      while (!c.in_flight.empty() && core.known(c.in_flight.front().at))
        c.passed.push_back(c.in_flight.pop_front().block);
    };
    take_known();
    if (c.unasked >= std::max<std::size_t>(1, warm_bytes / size) && !c.in_flight.empty()) {
      c.unasked = 0;
      if (core.passed(c.in_flight.front().at)) take_known();
    }
    if (!c.passed.empty()) {
      const pinned_block b = c.passed.back();
      c.passed.pop_back();
      return b;
    }
    const std::size_t n = c.in_flight.size();
    const std::size_t warm = std::min(n, detail::warm_slots);
    std::size_t i = detail::take_warmest(n, [&](std::size_t k) {
      return k + warm >= n ? core.known(c.in_flight[k].at) : core.passed(c.in_flight[k].at);
    });
    for (std::size_t k = n - warm; i == n && k < n; ++k)
      if (core.passed(c.in_flight[k].at)) i = k;
    return i < n ? c.in_flight.take(i).block : pinned_block{};
  }

  // A new block of `size` bytes for class `c`, counted; the class's lists get room for it first,
  // so that nothing can throw once it is allocated.
  pinned_block add_block(size_class& c, std::size_t size) {
    c.in_flight.reserve(c.blocks + 1);
    c.passed.reserve(c.blocks + 1);
    pinned_block b{allocate_block(size), size};
    ++c.blocks;
    ++stats_.allocations;
    stats_.bytes_reserved += size;
    return b;
  }

  // A new block of `size` bytes (a power of two, at least min_block), zero-filled.
  std::byte* allocate_block(std::size_t size) {
    if (!upstream_) return static_cast<std::byte*>(ops::alloc_pinned(size));
    void* p = detail::allocate_or_report([&] { return upstream_->allocate_sync(size, min_block); },
                                         size, "pinned", "the pinned_arena's upstream resource");
    if (reinterpret_cast<std::uintptr_t>(p) % min_block != 0 || !ops::is_mapped_pinned(p)) {
      upstream_->deallocate_sync(p, size, min_block);
      throw error(
          "ferry: the pinned_arena's upstream resource returned memory that is not 256-byte "
          "aligned, or not pinned and mapped at its own address (cudaHostAlloc with "
          "cudaHostAllocMapped, or cudaHostRegister with cudaHostRegisterMapped); kernels read "
          "arena blocks in place");
    }
    std::memset(p, 0, size);
    return static_cast<std::byte*>(p);
  }
  void free_block(pinned_block b) {
    if (upstream_)
      upstream_->deallocate_sync(b.data, b.capacity, min_block);
    else
      ops::free_pinned(b.data);
  }

  void give_back(pinned_block b, detail::stamp at) {
    auto& c = classes_[class_of(b.capacity)];
    if (at.empty()) {
      c.passed.push_back(b);
    } else {
      c.in_flight.push_back({b, at});
      ++c.unasked;
    }
    stats_.bytes_in_use -= b.capacity;
  }

  mutable std::mutex mutex_;
  std::size_t cap_;
  std::optional<pinned_resource_ref> upstream_;
  arena_stats stats_{};
  std::array<size_class, 64> classes_{};
};

/// The process-wide arena of backend B: created on first use (thread-safe), never destroyed
/// (intentionally leaked at exit, when streams may already be gone). Every staging function also
/// takes an explicit arena.
template <class B = default_backend>
pinned_arena<B>& default_arena() {
  static auto* arena = new pinned_arena<B>();
  return *arena;
}

}  // namespace ferry
