// ferry/memory/slot_ring.hpp: the stamped-slot ring that owns rotating memory's protocol (acquire,
// commit, release) for every component that rotates slots (the UVA pool, step_batch, the staged
// writes' slots), and the warm-reuse rule that the pinned arena shares (docs/design.md, "The slot
// ring").
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/backend/stats.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/ring.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/detail/warm_reuse.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/policies/reuse.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

/// Whether ferry stamps the uses of memory under ReusePolicy R (R fences): a slot_ring then checks
/// and waits, and a launch that reads its slots marks its stream. The one place that reads the
/// ReusePolicy's bit (SPEC §4); components ask here and never read it themselves.
template <reuse_policy R>
inline constexpr bool ring_stamps = R::ferry_fences;

/// The copy of `bytes` of host memory at `src` (which the caller may rewrite) into `dst` on `s`,
/// under ReusePolicy R: when ferry fences, `src` is first snapshotted into a block of `arena`
/// that goes back behind the copy (rewrite `src` at once); when the caller fences, the copy reads
/// `src` in place (the caller keeps it until the copy has run). Throws with nothing enqueued.
template <reuse_policy R, class B>
void copy_from_host(pinned_arena<B>& arena, void* dst, const void* src, std::size_t bytes, stream_ref<B> s) {
  if constexpr (ring_stamps<R>) {
    const pinned_block b = arena.acquire(bytes);
    try {
      std::memcpy(b.data, src, bytes);
      backend_ops<B>::copy_async(dst, b.data, bytes, s);
    } catch (...) {
      arena.release(b);
      throw;
    }
    arena.release(b, s);
  } else {
    backend_ops<B>::copy_async(dst, src, bytes, s);
  }
}

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

/// What follows a committed use of the acquired slot (slot_ring::commit).
enum class after_use {
  /// Nothing reads the slot beyond the commit's stamp: it is a candidate again once that has
  /// passed, the warmest of all (a staged write's apply).
  closed,
  /// As closed, but the next acquire takes another slot: a slot is not used twice in a row while
  /// the ring holds two or more (a step's slot).
  open,
  /// Open, and views of the slot may be read by work the ring does not see (a pending view): their
  /// readers are stamped by the next use (its acquire's stream, else its commit's stamp) or by
  /// record_use; release synchronizes the device while they are not (uva_pool's views, a step's
  /// publishes).
  view,
};

/// What a slot_ring has done (uva_pool's pool_stats, step_batch's step_stats): stamps it made,
/// acquires whose slot coming into use was still read (rotation order), full-ring waits that
/// blocked, slots it inserted. An acquire that throws counts its hit and its wait, nothing else.
struct ring_counts {
  std::uint64_t stamps = 0, hits = 0, waits = 0, inserted = 0;
};

template <class B, reuse_policy Reuse, class Slot>
struct slot_ring_access;  // tests/memory/slot_ring_test.cpp: the steps of acquire, one by one

/// A ring of slots of `Slot` (a component's memory), each guarded by stamps on backend B's reuse
/// core, under ReusePolicy `Reuse`: the one owner of rotating memory's protocol, as RMM's
/// stream-ordered resource owns its free lists. A component (uva_pool, step_batch, the staged
/// writes' slots) says what a slot is through a client's hooks and when it is used; the ring
/// chooses, waits, inserts and releases:
///  - acquire(client): the slot for the next use (the first free one in the ring's order, a new
///    one, or, the ring full, as the ReusePolicy says: a bounded wait or ferry::capacity_error);
///  - commit(done, what): its use was enqueued, stamped `done`; `what` says what reads it after;
///  - release(device, give_back, also): on destroy, every slot given back once its stamps passed,
///    the device synchronized first where a reader carries no stamp; a slot that cannot be waited
///    for is leaked, never handed out under a reader.
/// A slot whose stamps have not all passed is never offered. Not thread-safe (its clients are not).
template <class B, reuse_policy Reuse, class Slot>
class slot_ring {
  static constexpr bool fences = ring_stamps<Reuse>;
  friend struct slot_ring_access<B, Reuse, Slot>;

 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  /// A ring that may hold `max_slots` slots; while it holds fewer than `made_lazily`, acquire
  /// makes a new slot instead of reusing one (the staged writes' slots are made as they are first
  /// needed).
  slot_ring(ring_order order, std::size_t max_slots, std::size_t made_lazily = 0)
      : order_(order), max_(max_slots), lazy_(made_lazily) {}
  slot_ring(slot_ring&& o) noexcept { take_state(o); }
  slot_ring& operator=(slot_ring&& o) noexcept {
    if (this != &o) take_state(o);
    return *this;
  }
  slot_ring(const slot_ring&) = delete;
  slot_ring& operator=(const slot_ring&) = delete;

  /// Whether a use stamps the slot (the ReusePolicy fences): the ring checks and waits only then.
  static constexpr bool stamps_uses() noexcept { return fences; }
  /// The bound of the ring's waits: the ReusePolicy's wait_timeout(), else 0 (the process-wide
  /// bound, ferry::wait_timeout()).
  static std::chrono::nanoseconds wait_bound() { return reuse_wait_bound<Reuse>(); }

  [[nodiscard]] std::size_t size() const noexcept { return slots_.size(); }
  [[nodiscard]] bool empty() const noexcept { return slots_.empty(); }
  [[nodiscard]] std::size_t max_slots() const noexcept { return max_; }
  /// The current slot (the one acquired last), npos before the first acquire.
  [[nodiscard]] std::size_t current() const noexcept { return cur_; }
  Slot& operator[](std::size_t i) noexcept { return slots_[i].value; }
  const Slot& operator[](std::size_t i) const noexcept { return slots_[i].value; }
  /// What the ring has done so far.
  [[nodiscard]] const ring_counts& counts() const noexcept { return counts_; }
  /// Uses committed so far.
  [[nodiscard]] std::uint64_t uses() const noexcept { return uses_; }

  /// Before the first acquire in rotation order: it takes the slot after slot i (uva_pool's first
  /// call uses slot 1 % slots, as if the call before had used slot 0).
  void start_after(std::size_t i) noexcept { cur_ = i; }

  /// Room for `n` slots, so that acquire and push_back up to n do not allocate for the ring.
  void reserve(std::size_t n) {
    slots_.reserve(n);
    used_.reserve(n);
  }
  /// Appends a fresh slot (never used: free, taken before used ones in warmest order). Throws
  /// only when reserve() left no room.
  void push_back(Slot s) {
    reserve_for_one();
    entry e{std::move(s), std::move(spare_)};
    spare_ = slot_stamps{};
    slots_.push_back(std::move(e));
    used_.insert(fresh_count(), slots_.size() - 1);
  }

  /// Takes the slot for the next use, for the request client `c` describes, and returns its
  /// index: it becomes the current slot and holds the request. The client's hooks:
  ///  - `Slot make()`: a new slot holding the request (may throw: nothing kept);
  ///  - `void fit(Slot&)`: a free slot made to hold the request (grown, written; may throw with
  ///    the slot as it was);
  ///  - `std::string describe(std::size_t next)`: the full ring's message (the slot it would wait
  ///    for is `next`);
  ///  - optional `stream_ref<B> stream()`: the acquiring use's stream, on which the readers of a
  ///    pending view are stamped (before the check when its slot comes into use next, after it
  ///    otherwise, so that the check asks about the older stamp only);
  ///  - optional `static constexpr bool inserts`: false for a client whose slots must keep their
  ///    addresses (uva_pool under growth::fixed): a full ring at once.
  /// The steps: the first free slot in the ring's order (while it holds fewer than `made_lazily`,
  /// none); none free and the ring full (or the client never inserts): the ReusePolicy decides,
  /// a wait for the slot coming into use (bounded by wait_bound(): ferry::timeout_error) or
  /// ferry::capacity_error with c.describe(next); none free otherwise: c.make(), placed after
  /// the current slot (so before the busy one that would come next); a free one: c.fit(slot).
  /// Whatever throws leaves the ring as it was (stamps made on the way stay: they only make reuse
  /// more conservative).
  template <class Client>
  std::size_t acquire(Client& c) {
    constexpr bool has_stream = requires { c.stream(); };
    const std::size_t next = this->next();
    std::uint64_t made = 0;
    if constexpr (has_stream)
      if (pending_ && last_ == next) made += stamp(last_, c.stream());
    const bool chooses = slots_.size() >= lazy_;
    const bool rotating = chooses && order_ == ring_order::rotation && next != npos;
    const bool next_free = rotating && free(next);
    if constexpr (has_stream)  // before the walk below: the view's slot is never taken under its readers
      if (pending_ && last_ != next) made += stamp(last_, c.stream());
    std::size_t at = npos;
    if (rotating && next_free) {
      at = next;
    } else if (rotating) {
      ++counts_.hits;
      at = choose(1);
    } else if (chooses) {
      at = choose();
    }
    if (at == npos && (full() || !client_inserts<Client>())) {
      if (when_full(next, [&] { return c.describe(next); })) ++counts_.waits;
      at = next;
    }
    if (at == npos) {
      reserve_for_one();
      at = insert(c.make());
      ++counts_.inserted;
    } else {
      c.fit(slots_[at].value);
    }
    take(at);
    reserve_commit();
    counts_.stamps += made;
    return at;
  }

  /// Room for the stamps a commit adds (to the current slot and the pending view's), so that
  /// commit cannot throw: acquire makes it; a client that stamps the pending view in between
  /// (record_use) makes it again before the work it commits is enqueued.
  void reserve_commit() {
    if (cur_ != npos) slots_[cur_].stamps.reserve_one();
    if (pending_) slots_[last_].stamps.reserve_one();
  }

  /// The use of the acquired slot has been enqueued; `done` is the point after its work that the
  /// client marked (a kernel's mark_with; empty: none). `done` stamps the slot and the pending
  /// view's slot (its readers on that stream come before it); `what` says what follows. A closed
  /// use with no stamp is one no stamp covers (the caller fences): release then synchronizes the
  /// device. Under a ReusePolicy where the caller fences, the slot chosen next ignores the stamp;
  /// release still waits for it. Cannot throw (reserve_commit made the room).
  void commit(stamp done, after_use what) noexcept {
    slots_[cur_].stamps.add(done);
    if (pending_ && last_ != cur_) slots_[last_].stamps.add(done);
    ++uses_;
    last_ = cur_;
    pending_ = what == after_use::view && (fences || !done.empty());
    if (what == after_use::closed) {
      open_ = false;
      if (done.empty()) unstamped_ = true;
    }
  }

  /// Work enqueued on `s` so far reads the slot of the last commit (a reader on another stream
  /// than the next use's): it is stamped as the ReusePolicy asks. Nothing before the first commit.
  void record_use(stream_ref<B> s) {
    if (last_ == npos) return;
    slots_[last_].stamps.reserve_one();
    counts_.stamps += stamp(last_, s);
  }
  /// record_use(s), where the work on `s` so far is the pending view's only reader (uva_pool's
  /// copy_to_device): the view is no longer pending.
  void record_sole_use(stream_ref<B> s) {
    record_use(s);
    pending_ = false;
  }

  /// A use that writes nothing (uva_pool's empty call): the pending view's readers on `s` are
  /// stamped, and the ring moves on to the slot coming into use, taking nothing.
  void rotate(stream_ref<B> s) {
    if (pending_) record_use(s);
    cur_ = next();
  }

  /// The acquired slot is handed back unused: the current slot is again the one of the last
  /// commit (none before the first); the next acquire chooses as if this one had not happened.
  void cancel() noexcept { cur_ = last_; }

  /// The use of the acquired slot was enqueued but could not be stamped: its slot, and the pending
  /// view's (whose readers its stamp would have covered), leave the ring without being given back
  /// (leaked, never rewritten under a reader; release() then returns false). No slot is current
  /// until the next acquire.
  void abandon() noexcept {
    std::size_t a = cur_, b = pending_ && last_ != cur_ ? last_ : npos;
    if (b != npos && b > a) std::swap(a, b);  // the higher index first
    take_out(a);
    if (b != npos) take_out(b);
    cur_ = last_ = npos;
    pending_ = false;
    leaked_ = true;
  }

  /// Whether the use numbered `use` (uses() after it was committed), stamped `p`, is done: `p` has
  /// passed (ferry fences), or made_lazily uses have been committed since (the caller fences: its
  /// promise). For what a client stamps beside the ring (the staged writes' device scratch).
  [[nodiscard]] bool passed(stamp p, std::uint64_t use) {
    if constexpr (fences)
      return shared_timeline<B>().passed(p);
    else
      return uses_ - use >= lazy_;
  }

  /// Gives every slot back through `give_back(Slot&)` and empties the ring; all its waits end at
  /// one deadline (the ReusePolicy's wait_timeout(), else ferry::wait_timeout()). A pending view,
  /// or a use no stamp covers, first makes it synchronize device `device` (which needs no stream:
  /// theirs may be gone): if that fails or passes the deadline, what they may read is leaked (the
  /// view's slot; for a use no stamp covers, everything, and `also` is not called). Then each slot
  /// goes back once its stamps have passed (else leaked), and `also(deadline)` waits for what the
  /// client stamps beside the ring. Leaks are counted in ferry::swallowed_errors(). Returns
  /// whether every slot acquired went back.
  template <class GiveBack, class Also>
  bool release(int device, GiveBack&& give_back, Also&& also) noexcept {
    wait_deadline d = destructor_deadline([] { return wait_bound(); });
    bool all = !leaked_;
    if (!slots_.empty() && (pending_ || unstamped_) &&
        !destructor_guard([&] { backend_ops<B>::synchronize_device(device, d); })) {
      if (unstamped_) {
        forget();
        return false;  // everything handed to a stream may still be read
      }
      take_out(last_);
      all = false;
    }
    for (auto& e : slots_) {
      if (e.stamps.template all_passed_by<B>(d))
        destructor_guard([&] { give_back(e.value); });
      else
        all = false;
    }
    also(d);
    forget();
    return all;
  }
  template <class GiveBack>
  bool release(int device, GiveBack&& give_back) noexcept {
    return release(device, std::forward<GiveBack>(give_back), [](wait_deadline&) noexcept {});
  }

  /// The stamps of slot i (a full ring's message names the point it waits for).
  [[nodiscard]] const slot_stamps& stamps(std::size_t i) const noexcept { return slots_[i].stamps; }
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

  template <class Client>
  static constexpr bool client_inserts() {
    if constexpr (requires { Client::inserts; })
      return Client::inserts;
    else
      return true;
  }

  // ---- the steps of acquire (slot_ring_access exposes them to the ring's tests) ----

  /// size() >= max_slots(): no slot may be inserted.
  [[nodiscard]] bool full() const noexcept { return slots_.size() >= max_; }

  /// A use of slot i by the work enqueued on `s` so far: stamps it when the policy fences, and
  /// returns the number of stamps made (0 or 1). Needs room for a stamp to be free of allocation.
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
  /// `skip` candidates (rotation's acquire asked about next() itself), never the current slot
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
      // by use: a cancelled use leaves its slot the newest and the one before it current).
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

  /// Room for one more slot: made before the slot that insert() places, so that insert() cannot
  /// throw once it exists.
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
    if (last_ != npos && last_ >= at) ++last_;
    return at;
  }

  /// Slot i becomes the current one (a use: its stamps have all passed, or the caller fences).
  /// choose() leaves it out until a closed commit.
  void take(std::size_t i) noexcept {
    open_ = true;
    slots_[i].stamps.clear();
    slots_[i].fresh = false;
    if (order_ == ring_order::warmest)  // i moves to the newest place (room: it was there)
      used_.push_back(used_.take(use_position(i)));
    cur_ = i;
  }

  // Removes slot i without giving it back (leaked). The slot before it becomes the current one
  // (closed), so that the rotation goes on where slot i stood.
  void take_out(std::size_t i) noexcept {
    slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(i));
    (void)used_.take(use_position(i));
    for (std::size_t k = 0; k < used_.size(); ++k)
      if (used_[k] > i) --used_[k];
    if (last_ != npos && last_ > i) --last_;
    cur_ = slots_.empty() ? npos : (i + slots_.size() - 1) % slots_.size();
    open_ = false;
  }
  // Empties the ring (its slots given back or leaked).
  void forget() noexcept {
    slots_.clear();
    used_.clear();
    cur_ = last_ = npos;
    pending_ = unstamped_ = false;
  }

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
  void take_state(slot_ring& o) noexcept {
    order_ = o.order_;
    max_ = o.max_;
    lazy_ = o.lazy_;
    slots_ = std::move(o.slots_);
    used_ = std::move(o.used_);
    spare_ = std::move(o.spare_);
    cur_ = std::exchange(o.cur_, npos);
    last_ = std::exchange(o.last_, npos);
    open_ = std::exchange(o.open_, true);
    pending_ = std::exchange(o.pending_, false);
    unstamped_ = std::exchange(o.unstamped_, false);
    leaked_ = std::exchange(o.leaked_, false);
    uses_ = std::exchange(o.uses_, 0);
    counts_ = std::exchange(o.counts_, {});
    o.slots_.clear();
    o.used_.clear();
  }

  ring_order order_ = ring_order::rotation;
  std::size_t max_ = 0;
  std::size_t lazy_ = 0;          // acquire makes slots while the ring holds fewer
  std::vector<entry> slots_;      // in ring order
  ring<std::size_t> used_;        // slot indices by use, oldest first (never-used ones first)
  slot_stamps spare_;             // the stamps' room of the next slot inserted (reserve_for_one)
  std::size_t cur_ = npos;        // the slot acquired last
  std::size_t last_ = npos;       // the slot of the last commit
  bool open_ = true;              // the current slot is in use beyond its stamps (left out of choose())
  bool pending_ = false;          // last_ holds a view whose readers no stamp covers yet
  bool unstamped_ = false;        // a closed use was committed with no stamp (the caller fences)
  bool leaked_ = false;           // a slot was abandoned
  std::uint64_t uses_ = 0;        // commits
  ring_counts counts_{};
};

}  // namespace ferry::detail
