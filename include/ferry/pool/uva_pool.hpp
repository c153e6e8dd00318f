// ferry/pool/uva_pool.hpp: uva_pool<T, Policies...>, a ring of pinned, mapped slots that kernels
// read in place through UVA, rotated every call so that step N+1 is written while step N is read.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/mapping.hpp>
#include <ferry/backend/detail/timeline.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/tuning.hpp>
#include <ferry/detail/view_generation.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/slot_ring.hpp>
#include <ferry/memory/staged_view.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/pool/detail/source.hpp>
#include <ferry/pool/pool_stats.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry {

template <class T, class... Policies>
class uva_backed;

/// Elements per row, for a ferry::uva_pool or ferry::uva_backed made over rows of a fixed width
/// (as vLLM's `UvaBufferPool((rows, width))`): `uva_pool<float>(ferry::row_width{64}, 16)`.
struct row_width {
  std::size_t value = 1;  ///< Elements per row (> 0).
};

/// A ring of pinned, mapped slots of T that kernels read in place through UVA (no copy engine, no
/// device memory): the engine writes a small per-step array with copy_to_uva() and passes the
/// returned device_span to its kernels.
///
/// Policies (any order, each family at most once): GrowthPolicy (`growth::pow2` default,
/// `growth::fixed`), ReusePolicy (`reuse::event_fenced` default, `reuse::caller_fenced`), Backend.
///
/// **Rotation.** Every call first advances to the next slot (the first call uses slot
/// `1 % slots`), then writes there. A source larger than that slot's capacity grows the slot per
/// GrowthPolicy (pow2: to the next power of two at or above the size; contents not preserved;
/// the other slots untouched; the grown-out block goes back to the arena behind a fence);
/// `growth::fixed` throws ferry::capacity_error instead. The returned view holds exactly the
/// source's elements (stale elements beyond them are never exposed). An empty source rotates but
/// writes and grows nothing; the last view stays valid, and under event_fenced its slot is fenced
/// on the empty call's stream, as every call does. A call that throws changes nothing, rotation
/// included.
///
/// **Lifetime rule: a view stays valid for GPU work enqueued before the pool's next use of that
/// slot.** Destroying (or moving over) the pool is a use of every slot.
///
/// **reuse::event_fenced** (default): each call (empty or not) first fences the slot of the last
/// non-empty call's view on *this call's* stream, so the kernels that read that view, enqueued on
/// that stream before the call, are covered. A reader on any other stream must call
/// record_use(stream) after enqueuing its work and before the pool's next call (a slot may hold
/// fences on several streams). Destroying (or moving over) the pool waits for its readers: for
/// the fences it holds, and, while the last view is not yet fenced, for the whole device (as
/// freeing memory does; its readers' streams may be gone by then). A slot whose fences have not
/// all passed is never rewritten. When the slot coming into use is still read, the call walks on
/// round the ring to the first slot whose fences have all passed and uses that one (its index
/// becomes current_slot(); the held slot keeps its place and comes back into the rotation once
/// its readers are done); the slot of the call before is not taken (two calls in a row never
/// share a slot while the ring holds two or more). Only when no slot is free is a new slot (a
/// block from the arena) inserted in front of the held one, without blocking, up to `max_slots`.
/// Beyond that, and always under `growth::fixed` (which promises stable addresses and never
/// inserts), the ring is full and the ReusePolicy decides: reuse::event_fenced (the default)
/// waits until the slot coming into use (the one used longest ago) is free — back-pressure, as a
/// CUDA stream's own queue pushes back: the host runs at most max_slots - 1 calls ahead of the
/// readers; the wait is a synchronization, counted in backend_stats_of, by sync_guard and in
/// stats().full_waits — and reuse::throw_when_full throws ferry::capacity_error naming each held
/// slot and the stream point (the reuse core's line and seq) it waits for. A fence is a stamp of ferry's reuse core (one
/// timeline per backend, shared by every component): a stamp already known passed costs one
/// compare, and the backend is asked only when a slot comes back into use.
///
/// **reuse::caller_fenced**: no fences and no checks; the caller guarantees that every reader of
/// a slot has finished before the pool comes back to that slot (`slots` calls later), e.g. by
/// synchronizing once per step. A rewrite under a running reader is the caller's bug and is not
/// detected.
///
/// **Rows of a fixed width.** Made with ferry::row_width{w}, every slot holds whole rows of w
/// elements: capacities count rows, a source must be whole rows (n * w elements; otherwise
/// std::invalid_argument, changing nothing), growth applies to the row count (pow2: a source of
/// n rows grows the slot to `1 << bit_width(n - 1)` rows), and copy_rows_to_uva() returns the
/// n rows as a 2-D view (ferry::staged_view). Made without it, a row is one element.
///
/// Blocks come from an arena: ferry::default_arena<B>() unless one is given (it must outlive the
/// pool). Steady state (every slot at its largest size, the ring at its working depth) allocates
/// nothing and never synchronizes. Kernels read the slots in place: on a device whose mapping
/// ferry's probe finds dead (Confidential Computing, WSL2), construction throws ferry::error
/// naming the cause and the way out. Move-only; not thread-safe (const members are).
template <class T, class... Policies>
class uva_pool {
  static_assert((detail::check_element<T>(), true));
  using policy = detail::policies<
      detail::type_list<families::growth, families::reuse, families::backend>, Policies...>;

 public:
  using value_type = T;                           ///< The element type.
  using backend_type = typename policy::backend;  ///< The backend (Backend policy).
  using growth_policy = typename policy::growth;  ///< How slots grow (GrowthPolicy).
  using reuse_policy = typename policy::reuse;    ///< Who fences slots (ReusePolicy).

 private:
  using B = backend_type;
  using ops = detail::backend_ops<B>;
  static constexpr bool fixed = growth_policy::stable_addresses;
  // A slot: a pinned block from the arena and its logical capacity in rows (the GrowthPolicy's
  // number, which may be below what the block could hold); the ring keeps its stamps.
  struct slot {
    pinned_block block{};
    std::size_t capacity = 0;
    [[no_unique_address]] detail::slot_generation generation{};  // checked views (FERRY_CHECKED_VIEWS)
  };
  using ring_type = detail::slot_ring<B, reuse_policy, slot>;
  // Largest request: its byte size, rounded up to a power of two, must stay representable.
  static constexpr std::size_t max_request = (std::size_t{1} << 62) / sizeof(T);

 public:
  /// The default ceiling on slots (constructor's `max_slots`; docs/design.md, "Tuning constants").
  static constexpr std::size_t default_max_slots = detail::ring_default_max_slots;

  /// `slots` slots of `initial_capacity` elements each, from ferry::default_arena<B>().
  /// Throws std::invalid_argument when slots == 0 or slots > max_slots.
  explicit uva_pool(std::size_t initial_capacity, std::size_t slots = 2,
                    std::size_t max_slots = default_max_slots)
      : uva_pool(row_width{}, initial_capacity, slots, max_slots, default_arena<B>()) {}

  /// The same, with blocks from `arena` (which must outlive the pool).
  uva_pool(std::size_t initial_capacity, std::size_t slots, std::size_t max_slots,
           pinned_arena<B>& arena)
      : uva_pool(row_width{}, initial_capacity, slots, max_slots, arena) {}

  /// `slots` slots of `initial_rows` rows of `width.value` elements each, from
  /// ferry::default_arena<B>(). Throws std::invalid_argument when the width is 0, slots == 0 or
  /// slots > max_slots.
  uva_pool(row_width width, std::size_t initial_rows, std::size_t slots = 2,
           std::size_t max_slots = default_max_slots)
      : uva_pool(width, initial_rows, slots, max_slots, default_arena<B>()) {}

  /// The same, with blocks from `arena` (which must outlive the pool).
  uva_pool(row_width width, std::size_t initial_rows, std::size_t slots, std::size_t max_slots,
           pinned_arena<B>& arena)
      : uva_pool(named{"uva_pool"}, width, initial_rows, slots, max_slots, arena) {}

 private:
  // The name messages give the object: "uva_pool", or "uva_backed" for the pool of a uva_backed
  // (which makes its pool through this constructor).
  template <class, class...>
  friend class uva_backed;
  struct named {
    const char* name;
  };
  uva_pool(named n, row_width width, std::size_t initial_rows, std::size_t slots, std::size_t max_slots,
           pinned_arena<B>& arena)
      : name_(n.name), arena_(&arena), width_(width.value), ring_(detail::ring_order::rotation, max_slots),
        initial_(initial_rows) {
    if (width_ == 0)
      throw std::invalid_argument(prefix() + "rows need a width of at least one element (width 0)");
    if (slots == 0) throw std::invalid_argument(prefix() + "needs at least one slot (slots == 0)");
    if (slots > max_slots)
      throw std::invalid_argument(prefix() + "slots (" + std::to_string(slots) + ") exceeds max_slots (" +
                                  std::to_string(max_slots) + ")");
    if (initial_rows > max_request / width_)
      throw capacity_error(prefix() + "an initial capacity of " + std::to_string(initial_rows) +
                           (width_ == 1 ? " elements" : " rows of " + std::to_string(width_)) +
                           " is too large");
    device_ = ops::current_device();
    detail::require_live_mapping<B>(device_, name_);  // kernels read its slots in place
    ring_.reserve(slots);
    try {
      for (std::size_t i = 0; i < slots; ++i) ring_.push_back(make_slot(bytes_for(initial_rows), initial_rows));
    } catch (...) {
      release_all();
      throw;
    }
    ring_.start_after(0);  // as if the last call used slot 0: the first call uses slot 1 % slots
  }

 public:
  uva_pool(const uva_pool&) = delete;
  uva_pool& operator=(const uva_pool&) = delete;
  /// Views handed out by `o` stay valid (the slots move); `o` is left empty.
  uva_pool(uva_pool&& o) noexcept
      : name_(o.name_),
        arena_(o.arena_),
        width_(o.width_),
        ring_(std::move(o.ring_)),
        initial_(o.initial_),
        device_(o.device_),
        calls_(std::exchange(o.calls_, 0)),
        grows_(std::exchange(o.grows_, 0)) {}
  /// Releases this pool's slots (as the destructor does), then takes `o`'s.
  uva_pool& operator=(uva_pool&& o) noexcept {
    if (this != &o) {
      release_all();
      name_ = o.name_;
      arena_ = o.arena_;
      width_ = o.width_;
      ring_ = std::move(o.ring_);
      initial_ = o.initial_;
      device_ = o.device_;
      calls_ = std::exchange(o.calls_, 0);
      grows_ = std::exchange(o.grows_, 0);
    }
    return *this;
  }
  /// Waits for the pool's readers, then gives every block back to the arena: for the fences it
  /// holds (synchronizing only if a reader is still running) and, under event_fenced while the
  /// last non-empty view has not been fenced by a later call, for the device (its readers carry
  /// no fence yet, and their streams may already be destroyed).
  ~uva_pool() { release_all(); }

  /// Advances to the next slot, writes `src` into it (growing it per GrowthPolicy when needed)
  /// and returns a view of exactly size(src) elements for kernels on `stream` (lifetime rule in
  /// the class comment). `src`: any sized or forward std::ranges range of the element type
  /// (dtype rule; ferry::cast<T>(range) converts explicitly); contiguous ranges are one memcpy,
  /// others are gathered. The source is consumed when the call returns. Throws
  /// ferry::capacity_error (growth::fixed exceeded; under reuse::throw_when_full, no free slot with
  /// max_slots reached or under growth::fixed — reuse::event_fenced waits there instead; a
  /// GrowthPolicy capacity whose bytes overflow size_t; the arena's cap) and
  /// std::invalid_argument (not whole rows), changing nothing (stats().fence_hits excepted: it
  /// counts the busy slot found).
  template <class R>
  [[nodiscard]] device_span<const T> copy_to_uva(R&& src, stream_ref<B> stream) {
    detail::check_pool_source<std::remove_reference_t<R>, T>();
    [[maybe_unused]] const auto on_device = ops::enter(stream, device_);
    return put(src, detail::count_of(src), stream);
  }
  /// copy_to_uva of a braced list: `pool.copy_to_uva({1, 2, 3}, stream)`.
  [[nodiscard]] device_span<const T> copy_to_uva(std::initializer_list<T> src, stream_ref<B> stream) {
    [[maybe_unused]] const auto on_device = ops::enter(stream, device_);
    return put(src, src.size(), stream);
  }
  /// copy_to_uva(src, stream), viewed as its rows: size(src) / width() rows of width() elements.
  template <class R>
  [[nodiscard]] staged_view<const T> copy_rows_to_uva(R&& src, stream_ref<B> stream) {
    const device_span<const T> v = copy_to_uva(std::forward<R>(src), stream);
    return detail::rows_view(v, v.size() / width_, width_);
  }

  /// copy_to_uva(src, stream), then a stream-ordered copy of those elements into `out`; returns
  /// `out.first(size(src))`. `out` smaller than `src` → std::out_of_range, nothing changes and
  /// nothing is enqueued. The slot is fenced on `stream` behind the copy (event_fenced), so no
  /// record_use is needed for it.
  template <class R>
  [[nodiscard]] device_span<T> copy_to_device(R&& src, device_span<T> out, stream_ref<B> stream) {
    detail::check_pool_source<std::remove_reference_t<R>, T>();
    [[maybe_unused]] const auto on_device = ops::enter(stream, device_);
    const std::size_t n = detail::count_of(src);
    if (n > out.size())
      throw std::out_of_range("ferry: uva_pool::copy_to_device: the source has " + std::to_string(n) +
                              " elements but out has room for " + std::to_string(out.size()));
    const device_span<const T> v = put(src, n, stream);
    if (n == 0) return out.first(0);
    ops::copy_async(out.data(), v.data(), n * sizeof(T), stream);
    ring_.record_sole_use(stream);  // the copy is the view's only reader
    return out.first(n);
  }

  /// Declares that work enqueued on `stream` so far reads the current view (the one the last
  /// non-empty call returned; empty calls since then do not end it): the slot is fenced on
  /// `stream` too, and is not rewritten before `stream` has passed this point. Needed for readers
  /// on a stream other than the pool's next call's. A no-op under reuse::caller_fenced, and
  /// before the first non-empty call.
  void record_use(stream_ref<B> stream) {
    [[maybe_unused]] const auto on_device = ops::enter(stream, device_);
    ring_.record_use(stream);
  }

  /// Counters (see ferry::pool_stats).
  [[nodiscard]] pool_stats stats() const noexcept {
    const detail::ring_counts& c = ring_.counts();
    return {.slots = ring_.size(), .max_slots = ring_.max_slots(), .calls = calls_, .grows = grows_,
            .fence_hits = c.hits, .full_waits = c.waits, .inserted = c.inserted, .fences = c.stamps};
  }
  /// Slots in the ring now (the constructor's `slots` plus inserted ones; 0 when moved-from).
  [[nodiscard]] std::size_t slots() const noexcept { return ring_.size(); }
  /// The most slots the ring may hold.
  [[nodiscard]] std::size_t max_slots() const noexcept { return ring_.max_slots(); }
  /// The index of the slot the last call used (0 before the first call). An inserted slot takes
  /// the index after the previous slot; the slots after it move up by one.
  [[nodiscard]] std::size_t current_slot() const noexcept {
    return ring_.current() == ring_type::npos ? 0 : ring_.current();
  }
  /// Elements per row (1 unless made with a ferry::row_width).
  [[nodiscard]] std::size_t width() const noexcept { return width_; }
  /// The capacity, in rows (elements unless made with a ferry::row_width), of slot `i`;
  /// std::out_of_range for i >= slots().
  [[nodiscard]] std::size_t capacity(std::size_t i) const {
    if (i >= ring_.size())
      throw std::out_of_range("ferry: uva_pool::capacity: slot " + std::to_string(i) + " of " +
                              std::to_string(ring_.size()));
    return ring_[i].capacity;
  }
  /// All of slot `i`: capacity(i) rows of width() elements at its UVA address (pinned, mapped
  /// memory: the host's address too), for inspecting the ring. Elements past what the last call
  /// into the slot wrote are unspecified; the span obeys a view's lifetime rule (a later call that
  /// grows the slot gives its block back). std::out_of_range for i >= slots().
  [[nodiscard]] device_span<const T> slot_memory(std::size_t i) const {
    if (i >= ring_.size())
      throw std::out_of_range("ferry: uva_pool::slot_memory: slot " + std::to_string(i) + " of " +
                              std::to_string(ring_.size()));
    return {data_of(ring_[i]), ring_[i].capacity * width_};
  }

 private:
  std::string prefix() const { return std::string("ferry: ") + name_ + ": "; }
  std::string rows_text(std::size_t rows) const {
    return std::to_string(rows) + (width_ == 1 ? " elements" : " rows");
  }
  // The bytes of a slot of `rows` rows: checked, since a GrowthPolicy may answer with any
  // capacity at or above the request (ferry::capacity_error when the bytes overflow size_t).
  std::size_t bytes_for(std::size_t rows) const {
    std::size_t elements = 0, bytes = 0;
    if (!detail::mul_fits(rows, width_, elements) || !detail::mul_fits(elements, sizeof(T), bytes))
      [[unlikely]]
      throw capacity_error(prefix() + "a slot of " + rows_text(rows) +
                           (width_ == 1 ? "" : " of " + std::to_string(width_) + " elements") + " of " +
                           std::to_string(sizeof(T)) + " bytes overflows size_t");
    return bytes;
  }
  // bytes_for a capacity that the GrowthPolicy gave for a request of `rows`, naming both.
  std::size_t grown_bytes(std::size_t capacity, std::size_t rows, std::size_t current) const {
    try {
      return bytes_for(capacity);
    } catch (const capacity_error& e) {
      throw capacity_error(std::string(e.what()) + " (the GrowthPolicy's capacity_for(" +
                           std::to_string(rows) + ", " + std::to_string(current) + ") returned " +
                           std::to_string(capacity) + ")");
    }
  }
  static T* data_of(const slot& s) noexcept {
    return static_cast<T*>(ops::mapped(static_cast<void*>(s.block.data)));
  }

  slot make_slot(std::size_t bytes, std::size_t capacity) {
    slot s{{}, capacity};
    s.generation.prepare(name_);  // checked views: a call's commit then never allocates
    s.block = arena_->acquire(bytes);
    return s;
  }

  // The message when no slot can be taken: each held slot, from the one coming into use round
  // the ring, with the first stream point (the reuse core's line and seq) it still waits for;
  // and the slot of the call before, when its readers are done (it is not taken twice in a row).
  std::string held_slots(std::size_t next) const {
    return ring_.held_text(next, [&](std::string& text, std::size_t i, bool waits) {
      if (!waits && i == ring_.current())
        text += (text.empty() ? "slot " : "; slot ") + std::to_string(i) +
                " was written by the call before (a slot is not written twice in a row)";
    });
  }

  // What a call asks of the ring (slot_ring::acquire's hooks): a slot holding `n` elements of
  // `src` (`rows` rows), read on `stream`. Every hook that throws changes nothing.
  template <class R>
  struct claim {
    uva_pool& pool;
    R& src;
    std::size_t n, rows;
    stream_ref<B> on;
    static constexpr bool inserts = !fixed;  // growth::fixed promises stable addresses

    stream_ref<B> stream() const noexcept { return on; }
    // A slot inserted in front of a busy one: the initial capacity, or as the GrowthPolicy grows
    // it from there; written before it joins the ring.
    slot make() {
      const std::size_t cap =
          rows > pool.initial_ ? detail::grown_capacity<growth_policy>(rows, pool.initial_) : pool.initial_;
      slot fresh = pool.make_slot(pool.grown_bytes(cap, rows, pool.initial_), cap);
      try {
        detail::fill(src, data_of(fresh), n);
      } catch (...) {
        pool.arena_->release(fresh.block);
        throw;
      }
      return fresh;
    }
    // A free slot, grown per GrowthPolicy when the source exceeds it (a fresh block only when its
    // block cannot hold the new capacity; the grown-out block goes back to the arena behind a
    // fence on this stream: its own fences have all passed), then written.
    void fit(slot& s) {
      std::size_t cap = s.capacity;
      slot fresh;
      if (rows > s.capacity) {
        cap = detail::grown_capacity<growth_policy>(rows, s.capacity);
        const std::size_t bytes = pool.grown_bytes(cap, rows, s.capacity);
        if (s.block.capacity < bytes) fresh = pool.make_slot(bytes, cap);
      }
      s.generation.bump();  // its earlier views are stale from here
      try {
        detail::fill(src, fresh.block ? data_of(fresh) : data_of(s), n);
        if (fresh.block) pool.arena_->release(s.block, on);
      } catch (...) {
        if (fresh.block) pool.arena_->release(fresh.block);
        throw;
      }
      if (fresh.block) s.block = fresh.block;
      if (cap != s.capacity) ++pool.grows_;
      s.capacity = cap;
    }
    std::string describe(std::size_t next) const {
      return pool.prefix() +
             (fixed ? "(growth::fixed, which never inserts a slot) no slot is free: "
                    : "no slot is free and the ring already holds max_slots (" +
                          std::to_string(pool.ring_.max_slots()) + "): ") +
             pool.held_slots(next) + "; let the readers finish sooner, or allow more slots";
    }
  };

  // The one write path: the slot comes from the ring (slot_ring::acquire: the previous view's
  // readers on this call's stream stamped, the first free slot in rotation, a slot inserted in
  // front of a busy one, or the ReusePolicy's answer to a full ring), written by the claim's
  // hooks; the commit leaves its view pending (its readers are stamped by the next call).
  template <class R>
  device_span<const T> put(R& src, std::size_t n, stream_ref<B> stream) {
    if (ring_.empty()) throw error(prefix() + "used after it was moved from");
    const std::size_t rows = width_ == 1 ? n : n / width_;
    if (rows * width_ != n)
      throw std::invalid_argument(prefix() + "a source of " + std::to_string(n) +
                                  " elements is not whole rows of " + std::to_string(width_));
    if (n == 0) {  // rotates; writes and grows nothing. The last view stays valid.
      ring_.rotate(stream);
      ++calls_;
      return {data_of(ring_[ring_.current()]), 0};
    }
    if (n > max_request)
      throw capacity_error(prefix() + "a request of " + std::to_string(n) + " elements is too large");
    if constexpr (fixed) {  // before anything is stamped: every slot keeps its initial capacity
      if (rows > initial_)
        throw capacity_error(prefix() + "(growth::fixed) a request of " + rows_text(rows) +
                             " exceeds the slot capacity of " + rows_text(initial_));
    }
    claim<R> c{*this, src, n, rows, stream};
    const std::size_t at = ring_.acquire(c);
    ring_.commit({}, detail::after_use::view);
    ++calls_;
    return detail::stamp_view(device_span<const T>(data_of(ring_[at]), n), ring_[at].generation, name_);
  }

  // Destruction is a use of every slot (slot_ring::release): the last view's readers carry no
  // fence yet, so the device is synchronized first; all the waits end at one bound, past which
  // what may still be read is leaked.
  void release_all() noexcept {
    (void)ring_.release(device_, [&](slot& s) { arena_->release(s.block); });
  }

  const char* name_ = "uva_pool";  // what messages call the object (see `named`)
  pinned_arena<B>* arena_;
  std::size_t width_ = 1;        // elements per row; capacities count rows
  ring_type ring_;               // the slots; its current one is the slot of the last call
  std::size_t initial_ = 0;
  int device_ = 0;
  std::uint64_t calls_ = 0, grows_ = 0;  // stats(); the ring counts the rest
};

}  // namespace ferry
