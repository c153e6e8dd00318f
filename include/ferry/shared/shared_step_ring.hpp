// ferry/shared/shared_step_ring.hpp: one process writes each step's data once into a ring of
// slots in POSIX shared memory; every rank (a worker process, one per GPU) reads it from there, and
// a slot is reused only once every rank has marked it passed (docs/multi_gpu.md, "One host write,
// every rank reads it").
#pragma once

#include <ferry/backend/detail/wait_bound.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/config.hpp>
#include <ferry/error.hpp>
#include <ferry/policies/backend.hpp>
#include <ferry/shared/detail/shared_region.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ferry {

/// The shape of a shared step ring, the same in every process that opens it (its header says it,
/// and an opener of another shape is refused): `elements` values of T per step, `slots` steps in
/// flight (at least 2), `ranks` readers (1 to 1024), numbered 0 to ranks - 1.
struct shared_step_layout {
  std::size_t elements = 0;  ///< values of T per step
  std::uint32_t slots = 0;   ///< steps in flight (at least 2)
  std::uint32_t ranks = 0;   ///< readers (1 to 1024)
};

/// One step as a rank reads it: `size` values at `data` (on the CUDA backend the mapped device
/// address, readable by a kernel on any GPU through UVA; on the host backend the host address),
/// valid until this rank passes the step. Trivially copyable: pass it to a kernel by value.
template <class T>
struct shared_step {
  const T* data = nullptr;        ///< the step's values (mapped device address on CUDA)
  std::size_t size = 0;           ///< values at `data`
  std::uint64_t step = 0;         ///< the step's number
  std::uint64_t* mark = nullptr;  ///< this rank's mark (the same address space as `data`)

  /// Value i of the step (no bounds check: i < size).
  FERRY_HOST_DEVICE const T& operator[](std::size_t i) const noexcept { return data[i]; }

  /// Marks the step passed: the writer may reuse its slot once every rank has. In a kernel, the
  /// kernel's last act, by one thread, once every thread of every block is done with `data`
  /// (a kernel of one block: __syncthreads() first); on the host, after the last read of `data`.
  /// Steps are passed in order (passing a step passes every earlier one).
  FERRY_HOST_DEVICE void pass() const noexcept {
#if defined(__CUDA_ARCH__)
    __threadfence_system();
    *reinterpret_cast<volatile unsigned long long*>(mark) = step + 1;
#else
    std::atomic_ref<std::uint64_t>(*mark).store(step + 1, std::memory_order_release);
#endif
  }
};

namespace detail {

/// The checked layout of a ring of T.
template <class T>
shared_ring_shape shared_shape_of(const std::string& name, const shared_step_layout& l) {
  static_assert(std::is_trivially_copyable_v<T>, "ferry: a shared step ring holds trivially copyable values");
  const std::string what = "ferry: shared step ring \"" + name + "\": ";
  if (l.elements == 0) throw std::invalid_argument(what + "a step of 0 elements");
  if (l.elements > std::numeric_limits<std::uint64_t>::max() / sizeof(T))
    throw std::invalid_argument(what + std::to_string(l.elements) + " elements per step do not fit in memory");
  if (l.slots < 2)
    throw std::invalid_argument(what + std::to_string(l.slots) +
                                " slots: a ring needs at least 2 (one being read while the next is written)");
  if (l.ranks == 0 || l.ranks > shared_ring_max_ranks)
    throw std::invalid_argument(what + std::to_string(l.ranks) + " ranks: from 1 to " +
                                std::to_string(shared_ring_max_ranks));
  return {static_cast<std::uint64_t>(l.elements) * sizeof(T), static_cast<std::uint32_t>(sizeof(T)), l.slots, l.ranks};
}

inline void check_rank(const std::string& name, std::uint32_t rank, std::uint32_t ranks) {
  if (rank >= ranks)
    throw std::invalid_argument("ferry: shared step ring \"" + name + "\": rank " + std::to_string(rank) +
                                " out of range (the ring has " + std::to_string(ranks) + " ranks)");
}

inline std::string seconds_text(std::chrono::nanoseconds d) {
  return std::to_string(std::chrono::duration<double>(d).count()) + " s";
}

}  // namespace detail

/// The writing side of a shared step ring (one process, the scheduler): creates the shared memory
/// `name` (a POSIX shm name, "/something"; it must not exist) and unlinks it when destroyed.
/// publish() writes a step into the next slot once every active rank has passed the step that
/// slot last held; it reads each rank's mark with one load, and waits (bounded) only when a rank
/// is a whole ring behind. On the CUDA backend the memory is registered pinned and mapped
/// (cudaHostRegisterPortable | cudaHostRegisterMapped) in this process too.
template <class T, class B = default_backend>
class shared_step_writer {
 public:
  /// Creates the ring. `bound`: how long publish() waits for a rank (0: ferry::wait_timeout()).
  /// Bad layout or name: std::invalid_argument; a name that exists: ferry::error; nothing created.
  shared_step_writer(std::string name, shared_step_layout layout, std::chrono::nanoseconds bound = {})
      : layout_(layout),
        region_(detail::shared_region<B>::create(name, detail::shared_shape_of<T>(name, layout))),
        bound_(bound) {}

  /// Writes `data` (exactly layout().elements values) as the next step, and returns its number
  /// (0, 1, ...). Waits for ranks that have not passed the step whose slot it reuses; past the
  /// bound, ferry::timeout_error naming the first such rank and step (its process died or
  /// stalls: drop_rank() it to go on), nothing published.
  std::uint64_t publish(std::span<const T> data) {
    check_size(data.size());
    return publish_with([&](std::span<T> slot) { std::copy(data.begin(), data.end(), slot.begin()); });
  }

  /// publish() with the step written in place: `fill(std::span<T>)` writes every value of the
  /// slot. If `fill` throws, the exception propagates and nothing is published.
  template <class Fill>
  std::uint64_t publish_with(Fill&& fill) {
    const std::uint64_t w = head();
    if (w >= layout_.slots) {
      const std::uint64_t reused = w - layout_.slots;
      claim(reused);
      detail::wait_deadline d(bound_);
      std::uint32_t held = 0;
      const bool ok = detail::poll_until(d, [&] { return all_passed(reused, held); });
      if (!ok)
        throw timeout_error("ferry: shared step ring \"" + name() + "\": rank " + std::to_string(held) +
                            " has not passed step " + std::to_string(reused) + " within " +
                            detail::seconds_text(d.bound()) + " (step " + std::to_string(w) +
                            " reuses its slot); its process died or stalls: drop_rank(" + std::to_string(held) +
                            ") to go on without it. Nothing published");
      if (d.waited().count() > 0) ++waits_;
    }
    write(w, static_cast<Fill&&>(fill));
    return w;
  }

  /// publish() that never waits: the step's number, or nothing (nothing published) when a rank
  /// has not passed the step whose slot it would reuse.
  std::optional<std::uint64_t> try_publish(std::span<const T> data) {
    check_size(data.size());
    const std::uint64_t w = head();
    if (w >= layout_.slots) {
      claim(w - layout_.slots);
      std::uint32_t held = 0;
      if (!all_passed(w - layout_.slots, held)) return std::nullopt;
    }
    write(w, [&](std::span<T> slot) { std::copy(data.begin(), data.end(), slot.begin()); });
    return w;
  }

  /// Stops waiting for `rank` (its process died or stalls): its reader, if alive, is refused from
  /// its next acquire on; the rank can be joined again. A rank not active: nothing changes.
  void drop_rank(std::uint32_t rank) {
    detail::check_rank(name(), rank, layout_.ranks);
    auto state = detail::shared_atomic(region_.rank(rank).state);
    for (auto w = state.load(std::memory_order_seq_cst);;) {
      const shared_rank_state s = detail::state_of(w);
      if (s != shared_rank_state::active && s != shared_rank_state::joining) return;
      if (state.compare_exchange_weak(w, detail::with_state(w, shared_rank_state::dropped), std::memory_order_seq_cst))
        return;
    }
  }

  /// Where `rank` stands.
  [[nodiscard]] shared_rank_state rank_state(std::uint32_t rank) const {
    detail::check_rank(name(), rank, layout_.ranks);
    return detail::state_of(detail::shared_atomic(region_.rank(rank).state).load(std::memory_order_seq_cst));
  }
  /// The steps `rank` has passed (every step below the value returned).
  [[nodiscard]] std::uint64_t rank_passed(std::uint32_t rank) const {
    detail::check_rank(name(), rank, layout_.ranks);
    return detail::shared_atomic(region_.rank(rank).mark).load(std::memory_order_acquire);
  }
  /// Steps published so far (the next step's number).
  [[nodiscard]] std::uint64_t steps() const noexcept { return head(); }
  /// publish() calls that waited for a rank.
  [[nodiscard]] std::uint64_t waits() const noexcept { return waits_; }
  /// The shared memory's name.
  [[nodiscard]] const std::string& name() const noexcept { return region_.name(); }
  /// The ring's shape.
  [[nodiscard]] const shared_step_layout& layout() const noexcept { return layout_; }

 private:
  void check_size(std::size_t n) const {
    if (n != layout_.elements)
      throw std::invalid_argument("ferry: shared step ring \"" + name() + "\": a step of " + std::to_string(n) +
                                  " values; the ring's steps have " + std::to_string(layout_.elements));
  }
  [[nodiscard]] std::uint64_t head() const noexcept {
    return detail::shared_atomic(region_.header().head).load(std::memory_order_relaxed);  // written only here
  }
  // Announces that the slot of step `reused` is about to be written, before the ranks are read: a
  // reader joining at that step or earlier sees it and joins later (seq_cst on both sides).
  void claim(std::uint64_t reused) noexcept {
    detail::shared_atomic(region_.header().claim).store(reused + 1, std::memory_order_seq_cst);
  }
  // Whether every active rank has passed step `reused` (else `held`: the first that has not).
  bool all_passed(std::uint64_t reused, std::uint32_t& held) const noexcept {
    for (std::uint32_t r = 0; r < layout_.ranks; ++r) {
      auto& rec = region_.rank(r);
      if (detail::state_of(detail::shared_atomic(rec.state).load(std::memory_order_seq_cst)) != shared_rank_state::active)
        continue;
      if (detail::shared_atomic(rec.mark).load(std::memory_order_acquire) <= reused) {
        held = r;
        return false;
      }
    }
    return true;
  }
  template <class Fill>
  void write(std::uint64_t w, Fill&& fill) {
    const std::size_t i = static_cast<std::size_t>(w % layout_.slots);
    auto seq = detail::shared_atomic(region_.slot_seq(i));
    seq.exchange(detail::slot_writing, std::memory_order_acq_rel);  // before any byte of the data
    try {
      fill(std::span<T>(static_cast<T*>(region_.slot_data(i)), layout_.elements));
    } catch (...) {
      seq.store(0, std::memory_order_release);  // the slot's old step was passed by every rank
      throw;
    }
    seq.store(w + 1, std::memory_order_release);
    detail::shared_atomic(region_.header().head).store(w + 1, std::memory_order_seq_cst);
  }

  shared_step_layout layout_;
  detail::shared_region<B> region_;
  std::chrono::nanoseconds bound_;
  std::uint64_t waits_ = 0;
};

/// The reading side of a shared step ring (a rank: a worker process, or one of its GPUs): opens the
/// ring `name` that a writer created with the same layout and element type (checked against the
/// ring's header), takes rank `rank`, and starts at the current step (the last one published, or
/// step 0). On the CUDA backend the memory is registered pinned and mapped in this process, and
/// each step's data and mark are given as device addresses, read by kernels on any GPU.
template <class T, class B = default_backend>
class shared_step_reader {
 public:
  /// Opens the ring and joins as `rank`. `bound`: how long acquire() and leave() wait (0:
  /// ferry::wait_timeout()). A name that does not exist, a ring of another layout, version or
  /// element size, a rank out of range or taken by a live reader: std::invalid_argument, nothing
  /// changed.
  shared_step_reader(std::string name, shared_step_layout layout, std::uint32_t rank,
                     std::chrono::nanoseconds bound = {})
      : layout_(layout),
        region_(detail::shared_region<B>::open(name, detail::shared_shape_of<T>(name, layout))),
        rank_(rank),
        bound_(bound) {
    detail::check_rank(region_.name(), rank, layout_.ranks);
    join();
  }
  shared_step_reader(const shared_step_reader&) = delete;
  shared_step_reader& operator=(const shared_step_reader&) = delete;

  /// Leaves the ring (see leave()); past the bound, the rank is left anyway and the mapping leaked
  /// (stream work may still write the mark), counted by ferry::swallowed_errors().
  ~shared_step_reader() {
    if (!joined_) return;
    detail::wait_deadline d = detail::destructor_deadline([&] { return bound_; });
    if (!detail::poll_until(d, [&] { return marks_landed(); })) {
      detail::count_swallowed_error();
      region_.leak();
    }
    release_rank();
  }

  /// The next step acquire() gives.
  [[nodiscard]] std::uint64_t next_step() const noexcept { return next_; }
  /// This reader's rank.
  [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
  /// The shared memory's name.
  [[nodiscard]] const std::string& name() const noexcept { return region_.name(); }
  /// The ring's shape.
  [[nodiscard]] const shared_step_layout& layout() const noexcept { return layout_; }

  /// The next step, once the writer has published it; past the bound ferry::timeout_error, a rank
  /// the writer dropped (or that has left) ferry::error, nothing changed.
  shared_step<T> acquire() {
    std::optional<shared_step<T>> got;
    detail::wait_deadline d(bound_);
    if (!detail::poll_until(d, [&] { return (got = try_acquire()).has_value(); }))
      throw timeout_error("ferry: shared step ring \"" + name() + "\": rank " + std::to_string(rank_) +
                          " waited " + detail::seconds_text(d.bound()) + " for step " + std::to_string(next_) +
                          "; the writer has published " +
                          std::to_string(detail::shared_atomic(region_.header().head).load(std::memory_order_acquire)) +
                          " steps (it died or stalls)");
    return *got;
  }

  /// The next step, or nothing when it is not published yet. A rank the writer dropped (or that
  /// has left): ferry::error.
  std::optional<shared_step<T>> try_acquire() {
    check_joined();
    const std::size_t i = static_cast<std::size_t>(next_ % layout_.slots);
    const std::uint64_t seq = detail::shared_atomic(region_.slot_seq(i)).load(std::memory_order_acquire);
    if (seq == next_ + 1) {
      shared_step<T> s{region_.device_address(static_cast<const T*>(region_.slot_data(i))), layout_.elements, next_,
                       region_.device_address(&region_.rank(rank_).mark)};
      ++next_;
      return s;
    }
    if (seq != detail::slot_writing && seq > next_ + 1)  // reused without this rank: it was dropped meanwhile
      throw error("ferry: shared step ring \"" + name() + "\": rank " + std::to_string(rank_) + "'s step " +
                  std::to_string(next_) + " was overwritten (the writer dropped the rank)");
    return std::nullopt;
  }

  /// Marks `step` (acquired here) passed once the work enqueued on `s` before this call is done:
  /// the host backend a host task, the CUDA backend a host function (cudaLaunchHostFunc); a kernel
  /// that reads the step may instead call step.pass() as its last act. A step of another rank, or
  /// one before a step already passed: std::invalid_argument, nothing enqueued.
  void pass(stream_ref<B> s, const shared_step<T>& step) {
    check_joined();
    if (step.mark != region_.device_address(&region_.rank(rank_).mark) || step.step >= next_)
      throw std::invalid_argument("ferry: shared step ring \"" + name() + "\": pass of step " +
                                  std::to_string(step.step) + ", not a step rank " + std::to_string(rank_) +
                                  " acquired");
    if (step.step + 1 < passed_)
      throw std::invalid_argument("ferry: shared step ring \"" + name() + "\": pass of step " +
                                  std::to_string(step.step) + " after step " + std::to_string(passed_ - 1) +
                                  " (steps are passed in order)");
    std::uint64_t* mark = &region_.rank(rank_).mark;  // host address: the task runs on the host
    const std::uint64_t value = step.step + 1;
    enqueue_host(s, [mark, value] { std::atomic_ref<std::uint64_t>(*mark).store(value, std::memory_order_release); });
    passed_ = value;
  }

  /// Leaves the ring: waits (bounded) until the marks enqueued by pass() are written, then the
  /// writer stops waiting for this rank. Past the bound: ferry::timeout_error, still joined.
  void leave() {
    check_joined();
    detail::wait_deadline d(bound_);
    if (!detail::poll_until(d, [&] { return marks_landed(); }))
      throw timeout_error("ferry: shared step ring \"" + name() + "\": rank " + std::to_string(rank_) +
                          " cannot leave: its pass of step " + std::to_string(passed_ - 1) + " has not run within " +
                          detail::seconds_text(d.bound()) + " (its stream is held)");
    release_rank();
  }

 private:
  std::atomic_ref<std::uint64_t> state() const noexcept { return detail::shared_atomic(region_.rank(rank_).state); }

  // Gives the rank up, unless the writer dropped it (and another reader may have joined it since).
  void release_rank() noexcept {
    std::uint64_t w = word_;
    state().compare_exchange_strong(w, detail::with_state(word_, shared_rank_state::absent), std::memory_order_seq_cst);
    joined_ = false;
  }

  void check_joined() const {
    if (!joined_)
      throw error("ferry: shared step ring \"" + name() + "\": rank " + std::to_string(rank_) + " has left the ring");
    if (state().load(std::memory_order_relaxed) != word_)
      throw error("ferry: shared step ring \"" + name() + "\": the writer dropped rank " + std::to_string(rank_) +
                  " (it did not pass a step within the writer's bound)");
  }

  bool marks_landed() const noexcept {
    return detail::shared_atomic(region_.rank(rank_).mark).load(std::memory_order_acquire) >= passed_;
  }

  // Takes the rank and starts at the current step. The writer reads a rank's state after
  // announcing the slot it reuses (claim); this reader reads the claim after making itself active:
  // either the writer sees the rank (and waits for its mark), or the rank sees the claim and starts
  // at a later step (seq_cst on both sides).
  void join() {
    auto st = state();
    std::uint64_t w = st.load(std::memory_order_seq_cst);
    do {
      const shared_rank_state s = detail::state_of(w);
      if (s == shared_rank_state::active || s == shared_rank_state::joining)
        throw std::invalid_argument("ferry: shared step ring \"" + name() + "\": rank " + std::to_string(rank_) +
                                    " is taken by another reader");
    } while (!st.compare_exchange_weak(w, detail::next_join(w), std::memory_order_seq_cst));
    word_ = detail::with_state(detail::next_join(w), shared_rank_state::active);
    auto& h = region_.header();
    auto mark = detail::shared_atomic(region_.rank(rank_).mark);
    bool active = false;
    for (;;) {
      const std::uint64_t head = detail::shared_atomic(h.head).load(std::memory_order_seq_cst);
      next_ = head == 0 ? 0 : head - 1;
      mark.store(next_, std::memory_order_seq_cst);
      if (!active) {
        std::uint64_t joining = detail::next_join(w);
        if (!st.compare_exchange_strong(joining, word_, std::memory_order_seq_cst))
          throw error("ferry: shared step ring \"" + name() + "\": the writer dropped rank " + std::to_string(rank_) +
                      " while it joined");
        active = true;
      }
      if (detail::shared_atomic(h.claim).load(std::memory_order_seq_cst) <= next_) break;
    }
    passed_ = next_;
    joined_ = true;
  }

  shared_step_layout layout_;
  detail::shared_region<B> region_;
  std::uint32_t rank_;
  std::chrono::nanoseconds bound_;
  std::uint64_t next_ = 0;    // the next step acquire() gives
  std::uint64_t passed_ = 0;  // the mark of the last pass() (or the join)
  std::uint64_t word_ = 0;    // the rank's state word while this reader holds it
  bool joined_ = false;
};

}  // namespace ferry
