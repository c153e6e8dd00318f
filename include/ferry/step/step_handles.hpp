// ferry/step/step_handles.hpp: the handles of a step_batch (step_batch<...>::upload<T>,
// publish<T>, gather<T>, writes<T>): small values sharing the batch's state, through which the
// host writes a step's data straight into its pinned slot. Made by the batch's add_* calls only;
// empty when default-constructed.
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/config.hpp>
#include <ferry/detail/view_generation.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/step/detail/step_handle.hpp>
#include <ferry/step/step_context.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ranges>
#include <span>

namespace ferry {

namespace detail {
/// The device buffer that the upload or gather record `r` fills.
template <class T, class Record>
device_span<T> destination_of(const Record& r) {
  return {reinterpret_cast<T*>(r.dst), r.limit};
}
/// The epilogue's reference to the view that the record `r` declared.
template <class T, class Record>
step_ref<T> ref_of(const Record& r) {
  return step_ref_access<T>::make(static_cast<std::uint32_t>(r.view));
}
}  // namespace detail

/// A packed upload into a device buffer: each step, `span(n)` is where the host writes the
/// first n elements of the destination (pinned slot memory); the submit copies them.
template <class Batch, class T>
class step_upload : public detail::step_handle<Batch, typename Batch::core> {
  using handle = detail::step_handle<Batch, typename Batch::core>;
  using core = typename Batch::core;
  using handle::handle, handle::state, handle::i_;

 public:
  /// This step's n elements for destination[0, n), uninitialized: write every one of them
  /// before submit(). A second call in one step replaces the first. n > destination().size():
  /// std::out_of_range; growth::fixed and n > the declared max_n: ferry::capacity_error
  /// (nothing changes either way).
  [[nodiscard]] std::span<T> span(std::size_t n) {
    return {reinterpret_cast<T*>(state("upload").upload_span(i_, n, sizeof(T))), n};
  }
  /// The device buffer this upload fills. ferry::error for an empty handle or one whose batch
  /// was assigned over or destroyed.
  [[nodiscard]] device_span<T> destination() const {
    return detail::destination_of<T>(state("upload").plan().upload(i_));
  }
  /// The epilogue's reference to this upload: destination[0, n) for the step's n.
  [[nodiscard]] step_ref<T> ref() const {
    return detail::ref_of<T>(state("upload").plan().upload(i_));
  }
};

/// A UVA publish: each step, `span(n)` is where the host writes n elements (pinned slot
/// memory); `view()` is what kernels read in place, with no copy (see the class's lifetime rule).
template <class Batch, class T>
class step_publish : public detail::step_handle<Batch, typename Batch::core> {
  using handle = detail::step_handle<Batch, typename Batch::core>;
  using core = typename Batch::core;
  using ops = detail::backend_ops<typename Batch::backend_type>;
  using handle::handle, handle::state, handle::i_;

 public:
  /// This step's n elements, uninitialized: write every one before submit(). A second call in
  /// one step replaces the first. growth::fixed and n > the declared max_n:
  /// ferry::capacity_error (nothing changes).
  [[nodiscard]] std::span<T> span(std::size_t n) {
    return {reinterpret_cast<T*>(state("publish").publish_span(i_, n, sizeof(T))), n};
  }
  /// The kernel-readable view of the last span() of the current (or last submitted) step;
  /// empty before the step's span() call and after cancel(). ferry::error for an empty handle
  /// or one whose batch was assigned over or destroyed.
  [[nodiscard]] device_span<const T> view() const {
    core& k = state("publish");
    const auto& r = k.plan().publish(i_);
    const device_span<const T> v(static_cast<const T*>(ops::mapped(r.at)), r.n);
#if FERRY_CHECKED_VIEWS
    if (detail::slot_generation* g = k.generation(); r.n != 0 && g != nullptr)
      return detail::stamp_view(v, *g, "step_batch");
#endif
    return v;
  }
  /// The epilogue's reference to this publish: the step's n elements in its slot.
  [[nodiscard]] step_ref<const T> ref() const {
    return detail::ref_of<const T>(state("publish").plan().publish(i_));
  }
};

/// A gather into a device buffer: each step, `indices(n)` is where the host writes the source
/// row of each of dst[0, n); the submit's launch sets dst[i] = src[indices[i]] when it runs
/// (stream order: the source may be written by work enqueued before the submit, such as the
/// previous step's sampler), or, where indices[i] is ferry::from_host, host_values()[i].
template <class Batch, class T>
class step_gather : public detail::step_handle<Batch, typename Batch::core> {
  using handle = detail::step_handle<Batch, typename Batch::core>;
  using core = typename Batch::core;
  using handle::handle, handle::state, handle::i_;

 public:
  /// This step's n indices for destination[0, n) (pinned slot memory), uninitialized: write
  /// every one before submit(), each in [0, source size) or ferry::from_host (checked by
  /// submit: std::out_of_range, nothing enqueued). A second call in one step replaces the first
  /// (and its host values). n > destination().size(): std::out_of_range; growth::fixed and
  /// n > the declared max_n: ferry::capacity_error (nothing changes either way).
  [[nodiscard]] std::span<std::int32_t> indices(std::size_t n) {
    return {state("gather").gather_indices(i_, n), n};
  }
  /// After indices(n): n host values (pinned slot memory, uninitialized), taken by the rows
  /// whose index is ferry::from_host; the other rows' values are not read. ferry::error before
  /// indices() in the step.
  [[nodiscard]] std::span<T> host_values() {
    core& k = state("gather");
    return {reinterpret_cast<T*>(k.gather_values(i_)), k.plan().gather(i_).n};
  }
  /// The device buffer this gather fills.
  [[nodiscard]] device_span<T> destination() const {
    return detail::destination_of<T>(state("gather").plan().gather(i_));
  }
  /// The epilogue's reference to this gather: destination[0, n) for the step's n.
  [[nodiscard]] step_ref<T> ref() const {
    return detail::ref_of<T>(state("gather").plan().gather(i_));
  }
};

/// Staged writes into one rows x cols target, as staged_write_tensor's: each is recorded
/// straight into the slot and applied by the step's submit.
template <class Batch, class T>
class step_writes : public detail::step_handle<Batch, typename Batch::core> {
  using handle = detail::step_handle<Batch, typename Batch::core>;
  using core = typename Batch::core;
  using handle::handle, handle::state, handle::state_or_null, handle::i_;

 public:
  /// Records a write of the elements of `range` to [row][start, start + n). Checks first, even
  /// for an empty range: row < rows(), start <= cols(), n <= cols() - start; otherwise
  /// std::out_of_range naming them, and nothing is recorded. The element type must be T's
  /// (ferry's dtype rule). growth::fixed: beyond the declared max_writes / max_elements,
  /// ferry::capacity_error, nothing recorded. The range is consumed when this returns.
  template <std::ranges::input_range R>
    requires(std::ranges::sized_range<R> || std::ranges::forward_range<R>)
  void stage_write(std::size_t row, std::size_t start, R&& range) {
    detail::check_same_element<std::ranges::range_value_t<R>, T>();
    stage(row, start, range);
  }
  /// stage_write(row, start, {a, b, c}).
  void stage_write(std::size_t row, std::size_t start, std::initializer_list<T> values) {
    stage(row, start, std::span<const T>(values.begin(), values.size()));
  }
  /// A one-element write of `value` at [row][0] (ferry's scalar rule).
  template <class V>
  void stage_write_elem(std::size_t row, V value) {
    detail::check_scalar<V, T>();
    const T v = static_cast<T>(value);
    stage(row, 0, std::span<const T>(&v, 1));
  }
  /// Writes recorded in the open step (empty writes are not recorded). These four counts are 0
  /// for an empty handle; ferry::error for one whose batch was assigned over or destroyed.
  [[nodiscard]] std::size_t pending() const { return count([](const auto& r) { return r.writes; }); }
  /// Elements recorded in the open step.
  [[nodiscard]] std::size_t pending_elements() const { return count([](const auto& r) { return r.elements; }); }
  /// The target's rows.
  [[nodiscard]] std::size_t rows() const { return count([](const auto& r) { return r.rec.rows(); }); }
  /// The target's columns.
  [[nodiscard]] std::size_t cols() const { return count([](const auto& r) { return r.rec.cols(); }); }

 private:
  template <class R>
  void stage(std::size_t row, std::size_t start, R&& src) {
    state("writes").template stage_write<T>(i_, row, start, src);
  }
  template <class F>
  std::size_t count(F of) const {
    const core* k = state_or_null("writes");
    return k ? of(k->plan().writes(i_)) : 0;
  }
};

}  // namespace ferry
