// ferry/detail/view_generation.hpp: the generation of a rotating slot, which the views it hands
// out carry and compare when FERRY_CHECKED_VIEWS is 1 (docs/troubleshooting.md, "Checked views").
// Off (the default), slot_generation is an empty type and views carry nothing.
#pragma once

#include <ferry/config.hpp>

#if FERRY_CHECKED_VIEWS
#include <ferry/error.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>
#endif

namespace ferry::detail {

#if FERRY_CHECKED_VIEWS
/// The count a checked view compares with its own: bumped each time its slot is handed out again,
/// and when the slot is given back. Counters are never freed (a view may outlive the component
/// that made it: reading it then throws, never touches freed memory); a slot given back returns
/// its counter for another slot, count kept, so that an old view never matches again.
struct view_counter {
  std::atomic<std::uint64_t> count{0};
  const char* owner = "";  // what messages call the slot's component ("uva_pool", ...)
};

/// Throws the ferry::error of a read through a view whose slot was handed out again.
[[noreturn]] inline FERRY_COLD void throw_stale_view(const view_counter& c, std::uint64_t seen) {
  throw error(std::string("ferry: a stale view: its ") + c.owner +
              " slot has been handed out again since the view was made (view of generation " +
              std::to_string(seen) + ", the slot is at " +
              std::to_string(c.count.load(std::memory_order_acquire)) +
              "); a view stays valid until its component comes back to its slot: read it before, or "
              "copy what it holds (FERRY_CHECKED_VIEWS)");
}

/// The generation of one slot of a ring: a counter taken when the slot first hands out a view.
class slot_generation {
 public:
  slot_generation() = default;
  slot_generation(slot_generation&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  slot_generation& operator=(slot_generation&& o) noexcept {
    if (this != &o) {
      release();
      c_ = std::exchange(o.c_, nullptr);
    }
    return *this;
  }
  ~slot_generation() { release(); }

  /// The slot is handed out again: every view of it made so far reads as stale.
  void bump() noexcept {
    if (c_) c_->count.fetch_add(1, std::memory_order_acq_rel);
  }
  /// Takes the slot's counter now (it may allocate), so that a later stamp() cannot throw.
  void prepare(const char* owner) {
    if (!c_) c_ = take(owner);
  }
  /// The counter and count a view of the slot carries now (takes a counter on first use).
  std::pair<const view_counter*, std::uint64_t> stamp(const char* owner) {
    prepare(owner);
    return {c_, c_->count.load(std::memory_order_acquire)};
  }

 private:
  struct registry {
    std::mutex lock;
    std::deque<view_counter> counters;  // stable addresses
    std::vector<view_counter*> free;
  };
  static registry& shared() {
    static auto* r = new registry();  // never destroyed: views may be read at exit
    return *r;
  }
  static view_counter* take(const char* owner) {
    registry& r = shared();
    const std::lock_guard<std::mutex> g(r.lock);
    view_counter* c = nullptr;
    if (r.free.empty()) {
      c = &r.counters.emplace_back();
    } else {
      c = r.free.back();
      r.free.pop_back();
    }
    c->owner = owner;
    return c;
  }
  void release() noexcept {
    if (!c_) return;
    bump();  // a view of a slot given back is stale
    registry& r = shared();
    try {
      const std::lock_guard<std::mutex> g(r.lock);
      r.free.push_back(c_);
    } catch (...) {  // not recycled: the counter stays where it is, still correct
    }
    c_ = nullptr;
  }

  view_counter* c_ = nullptr;
};
#else
/// Unchecked views (FERRY_CHECKED_VIEWS 0): nothing to count.
struct slot_generation {
  constexpr void bump() noexcept {}
  constexpr void prepare(const char*) noexcept {}
};
#endif

}  // namespace ferry::detail
