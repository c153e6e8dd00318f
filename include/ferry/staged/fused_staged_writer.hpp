// ferry/staged/fused_staged_writer.hpp: fused_staged_writer<T, Policies...>, the pending writes
// of several staged_write_tensors applied with one kernel launch.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/mapping.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/slot_ring.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/staged/detail/apply.hpp>
#include <ferry/staged/detail/layout.hpp>
#include <ferry/staged/detail/slot_pool.hpp>
#include <ferry/staged/staged_write_tensor.hpp>
#include <ferry/staged/staging_memory.hpp>
#include <ferry/write/recorder.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <span>
#include <string>
#include <type_traits>

namespace ferry {

namespace detail {
template <class X>
inline constexpr bool is_staged_write_tensor = false;
template <class T, class... Ps>
inline constexpr bool is_staged_write_tensor<staged_write_tensor<T, Ps...>> = true;
}  // namespace detail

/// Applies the pending writes of several staged_write_tensors of element type T (any TargetKind,
/// the same backend) with one kernel launch: `apply(stream, a, b, c)`, or `apply(stream, span)`
/// for a number of tensors known at run time. Its own staging holds the
/// fused chunk table (rebased onto each tensor's target and contents); contents stay where each
/// tensor staged them and are read in place, or copied into this writer's device scratch (one
/// cudaMemcpyAsync per copied tensor) per the StagingPolicy: `by_target` decides per tensor (UVA
/// target: in place; device target: copied), `uva_direct` / `h2d_copy` for all,
/// `threshold<Bytes>` on the total content bytes. Each tensor's "later write wins" rule holds.
///
/// Policies: StagingPolicy, GrowthPolicy (`growth::fixed`: call reserve first), ReusePolicy,
/// Backend (TargetKind is accepted and unused: each tensor has its own). Destruction waits for
/// every apply that reads its staging: for their fences, or under reuse::caller_fenced, which
/// records none, for the whole device once it has applied. Its kernel reads the fused table in
/// place: on a device whose mapping ferry's probe finds dead, construction throws ferry::error
/// (apply each tensor alone there). Not thread-safe.
template <class T, class... Policies>
class fused_staged_writer {
  static_assert((detail::check_element<T>(), true));
  using policies =
      detail::policies<detail::type_list<families::target_kind, families::staging,
                                         families::growth, families::reuse, families::backend>,
                       Policies...>;

 public:
  /// The element type of every tensor applied.
  using value_type = T;
  /// The backend (Backend policy); every tensor applied must have it.
  using backend_type = typename policies::backend;
  /// How contents reach the kernel (StagingPolicy).
  using staging_policy = typename policies::staging;
  /// Growth of the fused table and scratch (GrowthPolicy).
  using growth_policy = typename policies::growth;
  /// Who fences this writer's staging slots (ReusePolicy).
  using reuse_policy = typename policies::reuse;

 private:
  using B = backend_type;
  using ops = detail::backend_ops<B>;
  static constexpr bool fixed = growth_policy::stable_addresses;

 public:
  /// A writer for up to `max_tensors` tensors per apply, with `slots` rotating staging slots.
  /// `memory`: where the staging slots and the H2D scratch come from (ferry::staging_memory).
  explicit fused_staged_writer(std::size_t max_tensors, std::size_t slots = 2,
                               const staging_memory<B>& memory = {})
      : device_(ops::current_device()),
        max_tensors_(max_tensors),
        pool_(slots, device_, memory) {
    detail::require_live_mapping<B>(device_, "fused_staged_writer");  // its kernel reads the slots in place
    detail::preload_apply<T, B>();  // never load a kernel module inside a later apply
  }

  /// Capacity for applies of up to `max_writes` writes of `max_elements` elements in all (over
  /// every tensor), allocated now. Under growth::fixed this is the capacity. A request whose sizes
  /// cannot be represented throws ferry::capacity_error with nothing changed.
  void reserve(std::size_t max_writes, std::size_t max_elements) {
    using detail::add_fits, detail::mul_fits;
    // The write plan's capacity, and each tensor's contents copied from a 256-aligned offset.
    detail::write_recorder::room need{};
    std::size_t table = 0, align = 0, scratch = 0;
    if (!detail::write_recorder::capacity(max_writes, max_elements, sizeof(T), need) ||
        !mul_fits(need.descs, sizeof(detail::chunk_desc), table) ||
        !mul_fits(max_tensors_, detail::content_alignment, align) || !add_fits(need.bytes, align, scratch))
      throw capacity_error("ferry: fused_staged_writer::reserve(" + std::to_string(max_writes) +
                           ", " + std::to_string(max_elements) + ") overflows size_t");
    pool_.reserve(std::max(table_bytes_, table), std::max(scratch_bytes_, scratch));
    table_bytes_ = std::max(table_bytes_, table);
    scratch_bytes_ = std::max(scratch_bytes_, scratch);
  }

  /// Applies the pending writes of `tensors` on `s` with one launch, then clears each of them.
  /// Tensors with nothing staged are skipped (nothing staged at all: no launch). The same tensor
  /// twice, or more than max_tensors tensors: std::invalid_argument. Whatever throws before the
  /// launch is enqueued leaves every tensor's staged writes and target as they were.
  template <class... Tensors>
  FERRY_KERNEL_VISIBILITY void apply(stream_ref<B> s, Tensors&... tensors) {
    static_assert((detail::is_staged_write_tensor<std::remove_cv_t<Tensors>> && ...),
                  "ferry: fused_staged_writer::apply takes staged_write_tensor arguments.");
    (check_type<Tensors>(), ...);
    const std::array<const void*, sizeof...(Tensors)> ids{static_cast<const void*>(&tensors)...};
    run<(false || ... || detail::ring_stamps<typename Tensors::reuse_policy>)>(
        s, std::span<const void* const>(ids), [&](auto&& f) { (f(tensors), ...); });
  }
  /// As apply(s, a, b, c), for a number of tensors known at run time (all of one type: one
  /// TargetKind and ReusePolicy). A null pointer: std::invalid_argument.
  template <class X>
  FERRY_KERNEL_VISIBILITY void apply(stream_ref<B> s, std::span<X* const> tensors) {
    static_assert(detail::is_staged_write_tensor<X>,
                  "ferry: fused_staged_writer::apply takes a span of staged_write_tensor pointers.");
    check_type<X>();
    run<detail::ring_stamps<typename X::reuse_policy>>(s, tensors, [&](auto&& f) {
      for (X* t : tensors) f(*t);
    });
  }

  /// The most tensors one apply takes.
  [[nodiscard]] std::size_t max_tensors() const noexcept { return max_tensors_; }

 private:
  template <class X>
  static constexpr void check_type() {
    static_assert(std::is_same_v<typename X::value_type, T>,
                  "ferry: fused_staged_writer<T> applies tensors of element type T only; every "
                  "tensor's element type must be T.");
    static_assert(std::is_same_v<typename X::backend_type, B>,
                  "ferry: fused_staged_writer applies tensors of its own backend only.");
  }

  /// apply()'s one body: `ids` names the tensors (their addresses), `each(f)` calls f on each of
  /// them in order; `Marked`: some tensor's ReusePolicy stamps its slots.
  template <bool Marked, class Ids, class Each>
  FERRY_KERNEL_VISIBILITY void run(stream_ref<B> s, Ids ids, Each&& each) {
    [[maybe_unused]] const detail::nvtx_scope<detail::nvtx_names::apply> range;
    [[maybe_unused]] const auto on_device = ops::enter(s, device_);
    const std::size_t n = ids.size();
    if (n > max_tensors_)
      throw std::invalid_argument("ferry: fused_staged_writer::apply got " + std::to_string(n) +
                                  " tensors; this writer takes at most " + std::to_string(max_tensors_));
    for (std::size_t i = 0; i < n; ++i) {
      if (ids[i] == nullptr)
        throw std::invalid_argument("ferry: fused_staged_writer::apply got a null tensor (position " +
                                    std::to_string(i) + ")");
      for (std::size_t j = i + 1; j < n; ++j)
        if (ids[i] == ids[j])
          throw std::invalid_argument("ferry: fused_staged_writer::apply got the same tensor twice "
                                      "(arguments " + std::to_string(i) + " and " + std::to_string(j) + ")");
    }
    each([&](auto& t) {
      if (t.device_ != device_)
        throw error("ferry: fused_staged_writer::apply got a tensor made on another device than "
                    "the writer (device " + std::to_string(device_) + ")");
      (void)batch_of(t);  // ferry::error for a moved-from tensor, before anything changes
    });
    if (n == 0) return;
    // Resolve overlaps within each tensor; count chunks and bytes.
    each([&](auto& t) { prepare(t); });
    std::size_t chunks = 0, bytes = 0;
    each([&](auto& t) { count(t, chunks, bytes); });
    if (chunks == 0) return;
    std::size_t copied = 0;
    each([&](auto& t) { count_copied(t, bytes, copied); });
    // This writer's slot: the fused chunk table (and scratch for copied contents).
    const std::size_t table =
        detail::checked_bytes<capacity_error>(chunks, sizeof(detail::chunk_desc), "a fused chunk table");
    std::size_t table_bytes = table_bytes_, scratch_bytes = scratch_bytes_;
    if constexpr (fixed) {
      if (table > table_bytes_ || copied > scratch_bytes_)
        throw capacity_error("ferry: fused_staged_writer under growth::fixed: this apply needs " +
                             std::to_string(chunks) + " chunks and " + std::to_string(copied) +
                             " bytes of scratch, beyond what reserve() gave");
    } else {
      if (table > table_bytes_) table_bytes = detail::grown_capacity<growth_policy>(table, table_bytes_);
      // High-water mark: the scratch grows to the largest apply seen, so a larger later apply
      // allocates once per stream, not at every size step.
      if (copied > scratch_bytes_) scratch_bytes = detail::grown_capacity<growth_policy>(copied, scratch_bytes_);
    }
    pool_.begin_apply();
    pool_.acquire_current(table_bytes);
    if (pool_.current().block.capacity < table) pool_.finish_grow(pool_.begin_grow(table_bytes));
    // Stream-ordered on s (never cudaMalloc, which may wait behind a held stream).
    std::byte* scratch = copied ? pool_.scratch(scratch_bytes, s) : nullptr;
    // Kept only once they were allocated: an answer no block holds is not remembered.
    table_bytes_ = table_bytes;
    scratch_bytes_ = scratch_bytes;
    // Build the table; enqueue the copies.
    auto* out = reinterpret_cast<detail::chunk_desc*>(pool_.current().block.data);
    std::size_t k = 0, off = 0;
    each([&](auto& t) { append(t, s, bytes, out, k, scratch, off); });
    // One launch; every slot it reads is done once `done` has passed (stamped when this writer
    // or any tensor fences its slots).
    constexpr bool marked = detail::ring_stamps<reuse_policy> || Marked;
    const detail::stamp done = detail::launch_apply<T, marked>(
        s, reinterpret_cast<const detail::chunk_desc*>(ops::mapped(out)), k, 0, 0, [&]() noexcept {
          pool_.abandon();
          each([&](auto& t) noexcept { abandon(t); });
        });
    pool_.commit(done);
    each([&](auto& t) noexcept { commit(t, done); });
  }

  // The tensor's batch of pending writes (staged_write_tensor's door for this writer);
  // ferry::error for a moved-from tensor.
  template <class X>
  static auto& batch_of(X& t) {
    auto* b = t.batch();
    if (b == nullptr) throw error("ferry: use of a moved-from staged_write_tensor");
    return *b;
  }
  template <class X>
  static void commit(X& t, detail::stamp done) noexcept {
    if (!batch_of(t).empty()) batch_of(t).commit(done);
  }
  template <class X>
  static void abandon(X& t) noexcept {
    if (!batch_of(t).empty()) batch_of(t).abandon();
  }
  template <class X>
  static void prepare(X& t) {
    if (!batch_of(t).empty()) batch_of(t).prepare();
  }
  template <class X>
  static void count(X& t, std::size_t& chunks, std::size_t& bytes) {
    chunks += batch_of(t).chunks();
    bytes += batch_of(t).content_bytes();
  }
  template <class X>
  static bool in_place(std::size_t total_bytes) {
    return detail::staged_reads_in_place<staging_policy, X::target_kind::memory>(total_bytes);
  }
  template <class X>
  static void count_copied(X& t, std::size_t total_bytes, std::size_t& copied) {
    if (batch_of(t).empty() || in_place<X>(total_bytes)) return;
    copied += detail::round_up(batch_of(t).content_bytes(), detail::content_alignment);
  }
  template <class X>
  static void append(X& t, stream_ref<B> s, std::size_t total_bytes, detail::chunk_desc* out,
                     std::size_t& k, std::byte* scratch, std::size_t& off) {
    auto& c = batch_of(t);
    if (c.empty()) return;
    const std::uint64_t dst0 = t.target_address() / sizeof(T);
    std::uint64_t src0 = 0;
    if (in_place<X>(total_bytes)) {
      src0 = reinterpret_cast<std::uintptr_t>(ops::mapped(const_cast<std::byte*>(c.content_data()))) / sizeof(T);
    } else {
      ops::copy_async(scratch + off, c.content_data(), c.content_bytes(), s);
      src0 = reinterpret_cast<std::uintptr_t>(scratch + off) / sizeof(T);
      off += detail::round_up(c.content_bytes(), detail::content_alignment);
    }
    const detail::chunk_desc* d = c.chunk_table();
    for (std::size_t i = 0; i < c.chunks(); ++i, ++k)
      out[k] = {d[i].dst + dst0, d[i].src + src0, d[i].count, 0};
  }

  int device_;
  std::size_t max_tensors_;
  std::size_t table_bytes_ = 0, scratch_bytes_ = 0;
  detail::slot_pool<B, growth_policy, reuse_policy> pool_;
};

}  // namespace ferry
