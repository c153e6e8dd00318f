// ferry/memory/slot_ring.hpp: the stamped-slot ring that every rotating component sits on (the
// UVA pool, step_batch), and the warm-reuse rule that the pinned arena shares (docs/design.md,
// "The slot ring").
#pragma once

#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/ring.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/detail/warm_reuse.hpp>
#include <ferry/policies/reuse.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ferry::detail {

/// The stamps of one slot: at most one per line of the reuse core (within a line a later point
/// covers every earlier one, so stamping a line the slot already has keeps the later point).
class slot_stamps {
 public:
  /// Room for the stamps of a few streams (when the slot is made, not on hot paths).
  static constexpr std::size_t reserved = slot_stamps_reserved;

  slot_stamps() = default;
  void reserve(std::size_t n) { stamps_.reserve(n); }
  /// Room for one more stamp, so that add() after work was enqueued cannot throw.
  void reserve_one() {
    if (stamps_.size() == stamps_.capacity()) [[unlikely]]
      stamps_.reserve(2 * stamps_.size() + reserved);
  }
  /// Adds `p` (an empty point adds nothing). Allocates only beyond the room reserved.
  void add(stamp p) {
    if (p.empty()) return;
    for (auto& q : stamps_) {
      if (q.line == p.line) {
        if (p.seq > q.seq) q = p;
        return;
      }
    }
    stamps_.push_back(p);
  }
  [[nodiscard]] bool empty() const noexcept { return stamps_.empty(); }
  [[nodiscard]] const std::vector<stamp>& points() const noexcept { return stamps_; }
  void clear() noexcept { stamps_.clear(); }

  /// True when every stamp has passed on backend B's reuse core (and then forgets them). Changes
  /// nothing if the backend query throws.
  template <class B>
  [[nodiscard]] bool passed() {
    auto& core = shared_timeline<B>();
    for (const auto& p : stamps_)
      if (!core.passed(p)) return false;
    stamps_.clear();
    return true;
  }
  /// The first stamp not yet passed; an empty stamp when all have.
  template <class B>
  [[nodiscard]] stamp held() const {
    auto& core = shared_timeline<B>();
    for (const auto& p : stamps_)
      if (!core.passed(p)) return p;
    return {};
  }
  /// Blocks until every stamp has passed, then forgets them (a full ring's back-pressure, and
  /// release on destroy), or until `d` expires: then wait_result::timed_out, `held` the stamp not
  /// passed, and the stamps kept. A wait that blocked is a synchronization, counted in
  /// backend_stats_of by the core and in ring_waits.
  template <class B>
  wait_result wait_all(wait_deadline& d, stamp& held) {
    bool blocked = false;
    auto& core = shared_timeline<B>();
    for (const auto& p : stamps_) {
      const wait_result r = core.wait_until(p, d);
      if (r == wait_result::timed_out) {
        held = p;
        return r;
      }
      blocked = blocked || r == wait_result::waited;
    }
    stamps_.clear();
    if (!blocked) return wait_result::passed;
    ++ring_waits;
    return wait_result::waited;
  }
  /// For destructors: wait_all until `d`; false when a stamp did not pass or the wait failed
  /// (counted in ferry::swallowed_errors(): what the stamps guard is then leaked).
  template <class B>
  bool all_passed_by(wait_deadline& d) noexcept {
    bool passed = false;
    stamp held{};
    if (destructor_guard([&] { passed = wait_all<B>(d, held) != wait_result::timed_out; }) && !passed)
      count_swallowed_error();
    return passed;
  }

 private:
  std::vector<stamp> stamps_;
};

/// The order in which a slot_ring offers its free slots.
enum class ring_order {
  /// Round the ring from the slot after the current one (a slot's place is its turn): a view's
  /// slot is rewritten `size()` uses later at the earliest.
  rotation,
  /// By use: the warm-reuse rule (take_warmest) over the slots other than the current one, so
  /// that while the stream keeps up the host writes the same few slots, warm in its caches. Slots
  /// never used are taken first.
  warmest,
};

/// A ring of slots of `Slot` (the component's memory), each guarded by stamps on backend B's reuse
/// core, under ReusePolicy `Reuse`. The ring does the reuse; the component says what a slot is,
/// when it is used (stamp) and what a full ring's messages say:
///  - stamp(i, s): a use of slot i by work enqueued on `s` so far: the stamp the policy asks for
///    (ferry fences: a point of `s`; the caller fences: nothing);
///  - choose(): the slot to use next: the first free one in the ring's order (a slot whose stamps
///    have not all passed is never offered), or npos; under a policy where the caller fences, the
///    next in rotation (nothing is stamped, so nothing is checked);
///  - insert(slot): a new slot placed after the current one (so before the busy one that would
///    come next), while size() < max_slots();
///  - when_full(wait_for, describe): a full ring's back-pressure, as the ReusePolicy says
///    (ferry::detail::ring_full: wait for slot `wait_for`, or throw ferry::capacity_error); a wait
///    past its bound (wait_bound()) throws ferry::timeout_error with describe(), nothing changed;
///  - take(i): slot i becomes the current one (its stamps have all passed), left out of choose()
///    while it may still be read beyond its stamps (a view of it) and until close();
///  - release(give_back): on destroy, every slot is given back once its stamps have passed; a slot
///    whose wait fails or passes the bound is leaked, never handed out under a reader.
/// Not thread-safe (its clients are not).
template <class B, reuse_policy Reuse, class Slot>
class slot_ring {
  // The one place that reads the ReusePolicy's bit (SPEC §4: a ReusePolicy says whether ferry
  // fences); components call the ring and never branch on it.
  static constexpr bool fences = Reuse::ferry_fences;

 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  slot_ring(ring_order order, std::size_t max_slots) : order_(order), max_(max_slots) {}
  slot_ring(slot_ring&& o) noexcept
      : order_(o.order_), max_(o.max_), slots_(std::move(o.slots_)), used_(std::move(o.used_)),
        cur_(std::exchange(o.cur_, npos)), open_(std::exchange(o.open_, true)) {
    o.slots_.clear();
  }
  slot_ring& operator=(slot_ring&& o) noexcept {
    order_ = o.order_;
    max_ = o.max_;
    slots_ = std::move(o.slots_);
    used_ = std::move(o.used_);
    cur_ = std::exchange(o.cur_, npos);
    open_ = std::exchange(o.open_, true);
    o.slots_.clear();
    return *this;
  }
  slot_ring(const slot_ring&) = delete;
  slot_ring& operator=(const slot_ring&) = delete;

  /// Whether a use stamps the slot (the ReusePolicy fences): the ring checks and waits only then.
  static constexpr bool stamps_uses() noexcept { return fences; }

  [[nodiscard]] std::size_t size() const noexcept { return slots_.size(); }
  [[nodiscard]] bool empty() const noexcept { return slots_.empty(); }
  [[nodiscard]] std::size_t max_slots() const noexcept { return max_; }
  /// size() >= max_slots(): no slot may be inserted.
  [[nodiscard]] bool full() const noexcept { return slots_.size() >= max_; }
  /// The current slot (the last taken), npos before the first take.
  [[nodiscard]] std::size_t current() const noexcept { return cur_; }
  Slot& operator[](std::size_t i) noexcept { return slots_[i].value; }
  const Slot& operator[](std::size_t i) const noexcept { return slots_[i].value; }
  [[nodiscard]] const slot_stamps& stamps(std::size_t i) const noexcept { return slots_[i].stamps; }

  /// Room for `n` slots, so that insert() and push_back() up to n do not allocate.
  void reserve(std::size_t n) {
    slots_.reserve(n);
    used_.reserve(n);
  }
  /// Appends a fresh slot (never used: free). Throws only when reserve() left no room.
  void push_back(Slot s) {
    reserve_for_one();
    entry e{std::move(s), std::move(spare_)};
    spare_ = slot_stamps{};
    slots_.push_back(std::move(e));
    used_.insert(fresh_count(), slots_.size() - 1);
  }

  /// A use of slot i by the work enqueued on `s` so far: stamps it when the policy fences, and
  /// returns the number of stamps made (0 or 1). Needs room for a stamp (reserve_stamp) to be
  /// free of allocation.
  std::size_t stamp(std::size_t i, stream_ref<B> s) {
    if constexpr (fences) {
      slots_[i].stamps.add(shared_timeline<B>().mark(s));
      return 1;
    } else {
      (void)i;
      (void)s;
      return 0;
    }
  }
  /// Adds a point the component made anyway (a kernel's mark_with) to slot i's stamps. Kept under
  /// every policy: choose() consults it only when the policy fences, release() waits for it always.
  void add_stamp(std::size_t i, detail::stamp p) { slots_[i].stamps.add(p); }
  /// Room for one more stamp of slot i (add_stamp/stamp then cannot throw).
  void reserve_stamp(std::size_t i) { slots_[i].stamps.reserve_one(); }

  /// Whether slot i is free: its stamps have all passed (then forgotten). Always true when the
  /// caller fences.
  [[nodiscard]] bool free(std::size_t i) {
    if constexpr (fences)
      return slots_[i].stamps.template passed<B>();
    else
      return true;
  }

  /// The slot that comes into use next: the one after the current (rotation; 0 before the
  /// first take), or the one used longest ago (warmest). A full ring waits for it.
  [[nodiscard]] std::size_t next() const noexcept {
    if (slots_.empty()) return npos;
    if (order_ == ring_order::rotation || !fences) return cur_ == npos ? 0 : (cur_ + 1) % slots_.size();
    return used_.front() == cur_ && open_ && used_.size() > 1 ? used_[1] : used_.front();
  }

  /// The free slot to use next, or npos when none is: in the ring's order, skipping the first
  /// `skip` candidates (a component that asked about next() itself), never the current slot
  /// while the ring holds two or more and it is not closed. When the caller fences, next().
  [[nodiscard]] std::size_t choose(std::size_t skip = 0) {
    if (slots_.empty()) return npos;
    if constexpr (!fences) {
      return skip == 0 ? next() : npos;
    } else {
      const std::size_t n = slots_.size();
      if (order_ == ring_order::rotation) {
        // Candidates, oldest first: cur+1, cur+2, ... round to the slot before the current one
        // (the only slot, when the ring holds one).
        const std::size_t first = cur_ == npos ? 0 : (cur_ + 1) % n;
        const std::size_t m = cur_ == npos || n == 1 || !open_ ? n : n - 1;
        for (std::size_t k = skip; k < m; ++k)
          if (free((first + k) % n)) return (first + k) % n;
        return npos;
      }
      if (const std::size_t f = fresh_count(); f > 0) return skip < f ? used_[skip] : npos;
      // Candidates by use, oldest first; the current slot left out while open (wherever it stands
      // by use: a cancelled step leaves its slot the newest and the one before it current).
      std::size_t pos = n;
      if (cur_ != npos && open_ && n > 1)  // the newest, unless a cancelled use came after it
        pos = use_position(cur_);
      const std::size_t m = pos == n ? n : n - 1;
      if (skip >= m) return npos;
      const auto at = [&](std::size_t j) { return used_[j < pos ? j : j + 1]; };
      // The warm ones are the warm_slots used last, the current one among them.
      const std::size_t k = take_warmest(
          m - skip, [&](std::size_t j) { return free(at(skip + j)); }, pos == n ? warm_slots : warm_slots - 1);
      return k == m - skip ? npos : at(skip + k);
    }
  }
  /// The bound of the ring's waits: the ReusePolicy's wait_timeout(), else 0 (the process-wide
  /// bound, ferry::wait_timeout()).
  static std::chrono::nanoseconds wait_bound() { return reuse_wait_bound<Reuse>(); }

  /// Blocks until slot i's stamps have all passed (the ONE back-pressure wait); returns whether
  /// it blocked (counted in ring_waits). Past wait_bound(): ferry::timeout_error with describe(),
  /// naming the slot, the stream point and how long it waited; nothing changed.
  template <class Describe>
  bool wait_free(std::size_t i, Describe&& describe) {
    wait_deadline d(wait_bound());
    detail::stamp held{};
    const wait_result r = slots_[i].stamps.template wait_all<B>(d, held);
    if (r == wait_result::timed_out)
      throw timeout_error(std::string(describe()) + "; the wait for slot " + std::to_string(i) + " (" +
                          point_name(held) + ") " + timeout_text(d) + "; nothing was changed");
    return r == wait_result::waited;
  }

  /// A full ring: the ReusePolicy decides (detail::ring_full): wait for slot `i` (then returns
  /// true when the wait blocked), or throw ferry::capacity_error with describe().
  template <class Describe>
  bool when_full(std::size_t i, Describe&& describe) {
    bool blocked = false;
    ring_full<Reuse>([&] { blocked = wait_free(i, describe); }, describe);
    return blocked;
  }

  /// Room for one more slot: call before making the slot that insert() places, so that insert()
  /// cannot throw once it exists.
  void reserve_for_one() {
    if (slots_.size() == slots_.capacity()) slots_.reserve(slots_.size() + 1);
    if (used_.size() == used_.capacity()) used_.reserve(used_.size() + 1);
    spare_.reserve(slot_stamps::reserved);
  }
  /// Places `s` after the current slot (at 0 before the first take) and returns its index; the
  /// slots after it move up by one. No allocation after reserve_for_one().
  std::size_t insert(Slot s) noexcept {
    const std::size_t at = cur_ == npos ? 0 : cur_ + 1;
    entry e{std::move(s), std::move(spare_)};
    spare_ = slot_stamps{};
    slots_.insert(slots_.begin() + static_cast<std::ptrdiff_t>(at), std::move(e));
    for (std::size_t k = 0; k < used_.size(); ++k)
      if (used_[k] >= at) ++used_[k];
    used_.insert(fresh_count(), at);
    return at;
  }

  /// Slot i becomes the current one (a use: its stamps have all passed, or the caller fences).
  /// choose() leaves it out until close().
  void take(std::size_t i) noexcept {
    open_ = true;
    slots_[i].stamps.clear();
    slots_[i].fresh = false;
    if (order_ == ring_order::warmest)  // i moves to the newest place (room: it was there)
      used_.push_back(used_.take(use_position(i)));
    cur_ = i;
  }
  /// The current slot's use is complete and stamped, and nothing of it stays in use beyond its
  /// stamps (no view into it): choose() offers it like any other slot once it has passed (the
  /// warmest of all). Rotation still starts after it.
  void close() noexcept { open_ = false; }
  /// Slot i becomes the current one without a use (a rotation that writes nothing).
  void rotate_to(std::size_t i) noexcept { cur_ = i; }
  /// Forgets which slot is current (the next rotation starts at slot 0).
  void reset_current() noexcept { cur_ = npos; }

  /// Removes slot i without giving it back (its readers could not be stamped: leaked, never
  /// rewritten under them), and returns it. The slot before it becomes the current one (closed),
  /// so that the rotation goes on where slot i stood.
  Slot abandon(std::size_t i) noexcept {
    Slot s = std::move(slots_[i].value);
    slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(i));
    (void)used_.take(use_position(i));
    for (std::size_t k = 0; k < used_.size(); ++k)
      if (used_[k] > i) --used_[k];
    cur_ = slots_.empty() ? npos : (i + slots_.size() - 1) % slots_.size();
    open_ = false;
    return s;
  }

  /// Gives every slot back through `give_back(Slot&)` once its stamps have passed, and empties the
  /// ring; all its waits together end at `d`. A slot whose wait fails or passes `d`, or whose
  /// give_back throws, is leaked (counted in ferry::swallowed_errors()).
  template <class GiveBack>
  void release(GiveBack&& give_back, wait_deadline& d) noexcept {
    for (auto& e : slots_)
      if (e.stamps.template all_passed_by<B>(d)) destructor_guard([&] { give_back(e.value); });
    slots_.clear();
    used_.clear();
    cur_ = npos;
  }
  /// release(give_back, d) with the ring's own bound.
  template <class GiveBack>
  void release(GiveBack&& give_back) noexcept {
    wait_deadline d = destructor_deadline([] { return wait_bound(); });
    release(std::forward<GiveBack>(give_back), d);
  }

  /// Each slot that still waits, from slot `from` round the ring, with the stream point (the reuse
  /// core's line and seq) it waits for, at most `listed` of them named: for a full ring's message.
  /// `also(text, i, waits)` may add to the text about slot i (`waits`: it is held).
  template <class Also>
  std::string held_text(std::size_t from, Also&& also, std::size_t listed = 8) const {
    std::string text;
    std::size_t held = 0;
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      const std::size_t i = (from + k) % slots_.size();
      const detail::stamp p = slots_[i].stamps.template held<B>();
      if (!p.empty() && held++ < listed)
        text += (held > 1 ? "; slot " : "slot ") + std::to_string(i) + " is held until " + point_text(p);
      also(text, i, !p.empty());
    }
    if (held > listed) text += "; and " + std::to_string(held - listed) + " more slots are held";
    return text;
  }
  /// "stream point (line L, seq S) has passed".
  static std::string point_text(detail::stamp p) { return point_name(p) + " has passed"; }

 private:
  struct entry {
    Slot value;
    slot_stamps stamps;
    bool fresh = true;  // never taken
  };
  // Where slot i stands by use (every slot stands there once), searched from both ends: the slot
  // taken is one of the newest or of the oldest, so the search is short however long the ring.
  std::size_t use_position(std::size_t i) const noexcept {
    const std::size_t n = used_.size();
    for (std::size_t k = 0; k < n; ++k) {
      if (used_[n - 1 - k] == i) return n - 1 - k;
      if (used_[k] == i) return k;
    }
    return n;
  }
  std::size_t fresh_count() const noexcept {
    std::size_t f = 0;
    while (f < used_.size() && f < slots_.size() && slots_[used_[f]].fresh) ++f;
    return f;
  }

  ring_order order_;
  std::size_t max_;
  std::vector<entry> slots_;      // in ring order
  ring<std::size_t> used_;  // slot indices by use, oldest first (never-used ones first)
  std::size_t cur_ = npos;
  bool open_ = true;   // the current slot is in use beyond its stamps (left out of choose())
  slot_stamps spare_;  // the stamps' room of the next slot inserted (reserve_for_one)
};

}  // namespace ferry::detail
