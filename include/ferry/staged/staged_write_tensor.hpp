// ferry/staged/staged_write_tensor.hpp: staged_write_tensor<T, Policies...>, a persistent 2-D
// target updated by diffs: the host stages ragged row-segment writes, one launch applies them.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/detail/mapping.hpp>
#include <ferry/backend/event.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/nvtx.hpp>
#include <ferry/element.hpp>
#include <ferry/error.hpp>
#include <ferry/memory/device_buffer.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/memory/pinned_buffer.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/memory/slot_ring.hpp>
#include <ferry/memory/staged_view.hpp>
#include <ferry/policies/detail/select.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/policies/staging.hpp>
#include <ferry/policies/target.hpp>
#include <ferry/staged/detail/apply.hpp>
#include <ferry/staged/detail/staging.hpp>
#include <ferry/staged/staging_memory.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ferry {

/// A persistent row-major `rows x cols` target of T, updated by diffs: `stage_write` records
/// row-segment writes on the host (straight into pinned staging memory), `apply_write(stream)`
/// applies all of them with one kernel launch.
///
/// The target is the tensor's own (allocated and zero-filled at construction), or memory the
/// caller owns, adopted as it is (its contents are kept): a device_span<T> for `target::device`,
/// a pinned_span<T> (pinned, mapped host memory) for `target::uva`. Adopted memory is not freed
/// by the tensor and must outlive it; the destructor waits for the tensor's applies before it
/// returns, so the caller may free the memory once the tensor is gone. The address is the
/// caller's (`span().data()` is it), and the caller orders its own work on the memory with the
/// applies by their streams.
///
/// Policies (any order, each family at most once): TargetKind (`target::device`: device memory,
/// default; `target::uva`: pinned, mapped host memory that kernels read and write in place;
/// `target::uva_or_device`: target::uva where the device's mapping is live, target::device where
/// it is not, chosen at construction: target_memory() says which),
/// StagingPolicy (`staging::by_target` default: UVA for a UVA target, H2D for a device target;
/// `uva_direct`; `h2d_copy`; `threshold<Bytes>`), GrowthPolicy (`growth::pow2` default;
/// `growth::fixed`: `reserve` sets the capacity, exceeding it throws ferry::capacity_error),
/// ReusePolicy (`reuse::event_fenced` default; `caller_fenced`), Backend; and the presets.
///
/// Rules: bounds are checked for every write, even an empty one; within one apply, of two writes
/// that overlap the one staged later wins, on both backends; offsets are 64-bit (targets past
/// 2^31 elements work); the host never synchronizes in stage_write or apply_write; a staging slot
/// that the GPU may still read is never rewritten (a fresh arena block is used instead, without
/// blocking); if apply_write throws before its launch is enqueued, the staged writes are kept and
/// the target is unchanged. CUDA graphs: apply_write is eager and throws on a capturing stream;
/// the target's address never changes, so a captured graph may read `span()`/`view()`.
///
/// Destruction waits for every apply that reads its staging or writes its target: for their
/// fences, or under reuse::caller_fenced, which records none, for the whole device once a staging
/// slot has been handed to a stream (synchronize_device; never for a tensor that has not applied).
/// Those waits end at the wait bound (ferry::wait_timeout, or the ReusePolicy's): past it the
/// destructor returns, leaking the staging an apply may still read.
///
/// Where ferry's mapping probe finds that kernels on the device do not see pinned memory through
/// its mapping (Confidential Computing, WSL2), construction decides: a target in device memory
/// (target::device, or target::uva_or_device's choice) makes every apply copy its chunk table and
/// contents H2D (or pass them in the launch), whatever the StagingPolicy; a target of pinned memory
/// (target::uva, or adopted by target::uva_or_device) throws ferry::error naming the cause and the
/// way out.
///
/// Move-only (owned or adopted, the target stays where it is: spans and views stay valid); a
/// moved-from tensor is empty. Not thread-safe.
template <class T, class... Policies>
class staged_write_tensor {
  static_assert((detail::check_element<T>(), true));
  using policies =
      detail::policies<detail::type_list<families::target_kind, families::staging,
                                         families::growth, families::reuse, families::backend>,
                       Policies...>;

 public:
  /// The element type.
  using value_type = T;
  /// The backend (Backend policy).
  using backend_type = typename policies::backend;
  /// Where the target lives (TargetKind policy).
  using target_kind = typename policies::target;
  /// How contents reach the kernel (StagingPolicy).
  using staging_policy = typename policies::staging;
  /// Growth of the staging capacity (GrowthPolicy).
  using growth_policy = typename policies::growth;
  /// Who fences staging slots (ReusePolicy).
  using reuse_policy = typename policies::reuse;

 private:
  using B = backend_type;
  using ops = detail::backend_ops<B>;
  static constexpr bool uva_target = target_kind::memory == memory_kind::uva;
  static constexpr bool marks = detail::ring_stamps<reuse_policy>;  // an apply marks its stream
  using core_type = detail::staging_core<T, B, growth_policy, reuse_policy>;
  // A target the tensor owns: pinned or device memory, as construction placed it (the other empty).
  struct storage_type {
    pinned_buffer<T, B> pinned;
    device_buffer<T, B> device;
  };
  // What construction decided: where the target lives, and whether applies copy all they read
  // (the device's mapping is dead: chunk table and contents H2D, nothing read in place).
  struct placement {
    memory_kind kind = target_kind::memory;
    bool copies_all = false;
  };
  // The target, placed and (when owned) allocated.
  struct target_memory_of {
    placement where;
    storage_type owned;
    T* address;  // device-accessible: the owned memory's, or the caller's
  };

 public:
  /// A zero-filled rows x cols target; the fill is complete when the constructor returns (it
  /// waits for a private stream, within the wait bound: construction is not a hot path). `slots`
  /// staging slots rotate (more slots amortize fence queries when the host runs ahead of the GPU).
  staged_write_tensor(std::size_t rows, std::size_t cols, std::size_t slots = 2)
      : staged_write_tensor(owned_target(rows, cols, nullptr, {}), rows, cols, slots, {}) {
    if (where_.kind == memory_kind::device) {
      stream<B> s;
      ops::fill_zero_async(target_, bytes(), s);
      event<B> filled;
      filled.record(s);
      filled.synchronize();
    }
  }
  /// A zero-filled rows x cols target, the fill enqueued on `s` (work on `s` after the
  /// constructor sees zeros). `memory`: where the staging slots, and a target::device target and
  /// the H2D scratch, come from (ferry::staging_memory; a device target from its resource is
  /// allocated and given back on `s`, which must then outlive the tensor).
  staged_write_tensor(std::size_t rows, std::size_t cols, stream_ref<B> s, std::size_t slots = 2,
                      const staging_memory<B>& memory = {})
      : staged_write_tensor(owned_target(rows, cols, &s, memory), rows, cols, slots, memory) {
    [[maybe_unused]] const auto on_device = ops::enter(s, device_);
    if (where_.kind == memory_kind::device) {
      ops::fill_zero_async(target_, bytes(), s);
      core_->pool().note_fill(s);
    }
  }
  /// target::device: the rows x cols target is `target`, device memory the caller owns, adopted:
  /// its contents are kept (nothing is filled or enqueued) and the tensor never frees it, so it
  /// must outlive the tensor. `target.size() != rows * cols`, or a null address with a nonzero
  /// size: std::invalid_argument naming them, nothing allocated. `memory`: where the staging
  /// slots and the H2D scratch come from (ferry::staging_memory).
  staged_write_tensor(device_span<T> target, std::size_t rows, std::size_t cols, std::size_t slots = 2,
                      const staging_memory<B>& memory = {})
      : staged_write_tensor(target_memory_of{place(memory_kind::device), {},
                                             adopted(target.data(), target.size(), rows, cols)},
                            rows, cols, slots, memory) {
    static_assert(!uva_target,
                  "ferry: a staged_write_tensor with target::uva adopts pinned, mapped host memory "
                  "as a pinned_span<T>, not a device_span<T>.");
  }
  /// target::uva: the rows x cols target is `target`, pinned, mapped host memory the caller owns
  /// (from a pinned_buffer, ferry::assume_pinned or ferry::from_torch_pinned), adopted as by the
  /// device_span constructor; kernels write it in place through its UVA address
  /// (`target.mapped()`), and the host reads it once the stream has passed the apply.
  staged_write_tensor(pinned_span<T> target, std::size_t rows, std::size_t cols, std::size_t slots = 2,
                      const staging_memory<B>& memory = {})
      : staged_write_tensor(target_memory_of{place(memory_kind::uva), {},
                                             adopted(target.mapped().data(), target.size(), rows, cols)},
                            rows, cols, slots, memory) {
    static_assert(uva_target,
                  "ferry: a staged_write_tensor with target::device adopts device memory as a "
                  "device_span<T>; pinned host memory (a pinned_span<T>) is adopted by a tensor "
                  "with target::uva.");
  }

  /// Takes over the target and the staged writes; spans and views handed out stay valid; `o` is
  /// left empty (0 x 0, nothing staged).
  staged_write_tensor(staged_write_tensor&& o) noexcept
      : device_(o.device_),
        rows_(std::exchange(o.rows_, 0)),
        cols_(std::exchange(o.cols_, 0)),
        where_(o.where_),
        owned_(std::move(o.owned_)),
        target_(std::exchange(o.target_, nullptr)),
        core_(std::move(o.core_)) {}
  /// Waits for this tensor's applies and frees its target (if it owns it), then takes over `o`'s.
  staged_write_tensor& operator=(staged_write_tensor&& o) noexcept {
    if (this != &o) {
      core_.reset();  // waits for this tensor's applies before its target goes
      owned_ = std::exchange(o.owned_, storage_type{});  // the old storage goes with the temporary
      target_ = std::exchange(o.target_, nullptr);
      core_ = std::move(o.core_);
      device_ = o.device_;
      where_ = o.where_;
      rows_ = std::exchange(o.rows_, 0);
      cols_ = std::exchange(o.cols_, 0);
    }
    return *this;
  }
  /// Waits for every apply that reads its staging or writes its target, then frees the staging and
  /// the target it owns (never adopted memory).
  ~staged_write_tensor() = default;

  /// Records a write of the elements of `range` to [row][start, start + n). Checks first, even
  /// for an empty range: row < rows(), start <= cols(), n <= cols() - start; otherwise
  /// std::out_of_range naming row, start and n, and nothing is recorded. The element type must be
  /// T's (ferry's dtype rule; convert explicitly with ferry::cast<T>(range)). The range has been
  /// consumed when this returns. growth::fixed: beyond the reserved capacity,
  /// ferry::capacity_error, nothing recorded.
  template <std::ranges::input_range R>
    requires(std::ranges::sized_range<R> || std::ranges::forward_range<R>)
  FERRY_FORCE_INLINE void stage_write(std::size_t row, std::size_t start, R&& range) {
    detail::check_same_element<std::ranges::range_value_t<R>, T>();
    core().stage(row, start, range);
  }
  /// stage_write(row, start, {a, b, c}).
  void stage_write(std::size_t row, std::size_t start, std::initializer_list<T> values) {
    core().stage(row, start, std::span<const T>(values.begin(), values.size()));
  }
  /// A one-element write of `value` at [row][0]; `value` converts only when the conversion is
  /// value-preserving (ferry's scalar rule).
  template <class V>
  void stage_write_elem(std::size_t row, V value) {
    detail::check_scalar<V, T>();
    const T v = static_cast<T>(value);
    core().stage(row, 0, std::span<const T>(&v, 1));
  }

  /// Writes staged since the last apply or clear (empty writes are not recorded).
  [[nodiscard]] std::size_t pending() const noexcept { return core_ ? core_->pending() : 0; }
  /// Elements staged since the last apply or clear.
  [[nodiscard]] std::size_t pending_elements() const noexcept {
    return core_ ? core_->pending_elements() : 0;
  }
  /// Drops the staged writes.
  void clear() noexcept {
    if (core_) core_->clear();
  }
  /// Capacity for applies of up to `max_writes` writes of `max_elements` elements in all,
  /// allocated now (pinned staging for every slot, and device scratch when the staging policy
  /// may copy), so that steady state allocates nothing. Under growth::fixed this is the capacity.
  /// Sizes that cannot be represented: ferry::capacity_error, and nothing changes.
  void reserve(std::size_t max_writes, std::size_t max_elements) {
    const bool may_copy = where_.copies_all || staging_policy::in_place_max_bytes(where_.kind) <
                                                   std::numeric_limits<std::size_t>::max();
    core().reserve(max_writes, max_elements, may_copy, where_.copies_all);
  }

  /// Applies every staged write on `s` with one kernel launch and clears them. Nothing staged:
  /// no launch, no rotation. Contents are read in place through UVA or copied first (one
  /// cudaMemcpyAsync) per the staging policy; on CUDA, an in-place apply whose chunk table and
  /// contents fit in 4 KiB passes them in the launch's parameters instead (one launch, nothing
  /// read over PCIe, no fence). Never synchronizes. Throws ferry::error on a stream
  /// of another device or one that is capturing a graph; whatever throws before the launch is
  /// enqueued leaves the staged writes and the target as they were.
  FERRY_KERNEL_VISIBILITY void apply_write(stream_ref<B> s) {
    [[maybe_unused]] const detail::nvtx_scope<detail::nvtx_names::apply> range;
    [[maybe_unused]] const auto on_device = ops::enter(s, device_);
    core_type& c = core();
    if (c.empty()) return;
    c.prepare();
    const bool in_place =
        !where_.copies_all && c.content_bytes() <= staging_policy::in_place_max_bytes(where_.kind);
    // Small: chunk table and contents travel in the launch's parameters (no PCIe read by the
    // kernel, no fence, no slot rotation): when the contents may be read in place, and wherever
    // nothing may be.
    if ((in_place || where_.copies_all) &&
        detail::launch_apply_inline<T, B>(s, c.chunk_table(), c.chunks(), c.content_data(),
                                          c.content_bytes(), target_address())) {
      c.commit_inline();
      return;
    }
    std::uintptr_t descs = address(c.chunk_table());
    std::uintptr_t src = 0;
    if (in_place) {
      src = address(c.content_data());
    } else if (!where_.copies_all) {
      std::byte* scratch = c.scratch(s);
      ops::copy_async(scratch, c.content_data(), c.content_bytes(), s);
      src = reinterpret_cast<std::uintptr_t>(scratch);
    } else {
      // The kernel reads nothing in place: the chunk table comes with the contents, in one copy
      // of the slot (the contents at the same 256-aligned offset, so their congruence holds).
      std::byte* scratch = c.slot_scratch(s);
      ops::copy_async(scratch, c.slot_data(), c.slot_bytes_used(), s);
      descs = reinterpret_cast<std::uintptr_t>(scratch);
      src = reinterpret_cast<std::uintptr_t>(scratch + c.content_offset());
    }
    c.commit(detail::launch_apply<T, marks>(s, reinterpret_cast<const detail::chunk_desc*>(descs), c.chunks(),
                                            target_address(), src, [&]() noexcept { c.abandon(); }));
  }

  /// The whole target, row-major (device memory, or the UVA view of pinned memory; for adopted
  /// memory, the caller's address).
  [[nodiscard]] device_span<T> span() const noexcept {
    return {target_, rows_ * cols_};
  }
  /// The target as a rows x cols view usable in device code (ferry::staged_view<T>).
  [[nodiscard]] staged_view<T> view() const noexcept {
    return staged_view<T>(target_, rows_, cols_);
  }
  /// Where the target lives: the TargetKind's memory, or (target::uva_or_device on a device whose
  /// mapping is not live) where construction placed it instead.
  [[nodiscard]] memory_kind target_memory() const noexcept { return where_.kind; }
  /// Number of rows.
  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
  /// Number of columns.
  [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
  /// rows() x cols().
  [[nodiscard]] std::size_t size() const noexcept { return rows_ * cols_; }

 private:
  // fused_staged_writer applies a tensor's pending writes through batch() (null once moved
  // from), device_ and target_address(), nothing else.
  template <class, class...>
  friend class fused_staged_writer;
  core_type* batch() noexcept { return core_.get(); }

  // The target placed (and, when owned, allocated); the core for `slots` staging slots.
  staged_write_tensor(target_memory_of&& t, std::size_t rows, std::size_t cols, std::size_t slots,
                      const staging_memory<B>& memory)
      : device_(ops::current_device()),
        rows_(rows),
        cols_(cols),
        where_(t.where),
        owned_(std::move(t.owned)),
        target_(t.address),
        core_(std::make_unique<core_type>(rows, cols, slots, device_, memory)) {
    detail::preload_apply<T, B>();  // never load a kernel module inside a later apply
  }

  // Where a target of `kind` lives (the TargetKind's memory, or, for an owned target on a device
  // whose mapping the probe finds dead, its without_live_mapping), and whether applies copy all
  // they read. A target of pinned memory on such a device: ferry::error.
  static placement place(memory_kind kind, bool owned = false) {
    const int device = ops::current_device();
    auto& verdicts = detail::mapping_verdicts<B>::instance();
    if (verdicts.state(device) != detail::mapping_state::dead) return {kind, false};
    if (owned) kind = detail::target_without_live_mapping<target_kind>();
    if (kind == memory_kind::uva)
      throw error(detail::dead_mapping_text("staged_write_tensor (a target of pinned memory)", device,
                                            verdicts.finding(device)));
    return {kind, true};
  }
  // An owned rows x cols target, placed: pinned memory, or device memory (from `memory.device`, in
  // order on `*s`, when a stream is given and the staging memory names a resource).
  static target_memory_of owned_target(std::size_t rows, std::size_t cols, const stream_ref<B>* s,
                                       const staging_memory<B>& memory) {
    const std::size_t n = checked_size(rows, cols);
    target_memory_of t{place(target_kind::memory, true), {}, nullptr};
    if (t.where.kind == memory_kind::uva) {
      t.owned.pinned = pinned_buffer<T, B>(n);
      t.address = t.owned.pinned.device().data();
    } else {
      t.owned.device = s && memory.device ? device_buffer<T, B>(n, *s, *memory.device) : device_buffer<T, B>(n);
      t.address = t.owned.device.data();
    }
    return t;
  }

  static std::size_t checked_size(std::size_t rows, std::size_t cols) {
    if (cols != 0 && rows > std::numeric_limits<std::size_t>::max() / sizeof(T) / cols)
      throw std::invalid_argument("ferry: a staged_write_tensor of " + std::to_string(rows) +
                                  " x " + std::to_string(cols) + " elements overflows size_t");
    return rows * cols;
  }
  // The address of adopted memory of `size` elements, checked to be a rows x cols target.
  static T* adopted(T* data, std::size_t size, std::size_t rows, std::size_t cols) {
    const std::size_t n = checked_size(rows, cols);
    if (size != n)
      throw std::invalid_argument("ferry: staged_write_tensor: the adopted memory holds " +
                                  std::to_string(size) + " elements, but a " + std::to_string(rows) +
                                  " x " + std::to_string(cols) + " target needs " +
                                  std::to_string(n));
    if (data == nullptr && size != 0)
      throw std::invalid_argument("ferry: staged_write_tensor: the adopted memory of " +
                                  std::to_string(size) + " elements has a null address");
    return data;
  }
  [[nodiscard]] std::size_t bytes() const noexcept { return rows_ * cols_ * sizeof(T); }
  core_type& core() {
    if (!core_) throw error("ferry: use of a moved-from staged_write_tensor");
    return *core_;
  }
  static std::uintptr_t address(const void* host) noexcept {
    return reinterpret_cast<std::uintptr_t>(ops::mapped(const_cast<void*>(host)));
  }
  [[nodiscard]] std::uintptr_t target_address() const noexcept {
    return reinterpret_cast<std::uintptr_t>(target_);
  }

  int device_;
  std::size_t rows_, cols_;
  placement where_;
  storage_type owned_;  // the target if owned (empty if adopted); destroyed after core_, which
                        // waits for the applies
  T* target_;           // the target's device-accessible address: owned_'s or the caller's
  std::unique_ptr<core_type> core_;
};

}  // namespace ferry
