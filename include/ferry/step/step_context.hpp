// ferry/step/step_context.hpp: what a step_batch's epilogue sees: ferry::step_ref<T>, a typed
// reference to one of the step's views, and ferry::step_context, the step's views as this step
// filled them and the threads that run the epilogue; and ferry::from_host, the gather index that
// takes a row from the host.
#pragma once

#include <ferry/config.hpp>
#include <ferry/memory/device_span.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ferry {

/// The gather index of a row that takes its value from the host (step_batch::gather's
/// host_values()) instead of from the gather's device source.
inline constexpr std::int32_t from_host = -1;

namespace detail {
/// One of a step's views as its table hands it to the epilogue: the first element and the count.
struct step_view_entry {
  std::uint64_t data;
  std::uint64_t size;
};
template <class>
struct step_ref_access;
}  // namespace detail

/// A typed reference to one of a step_batch's views (an upload's or a gather's destination, a
/// publish's slot view), made at plan time by the handle's ref() and held by an epilogue functor.
/// Trivially copyable; its value is an index into the step's views.
template <class T>
class step_ref {
 public:
  /// A reference to nothing (an epilogue must not look it up).
  constexpr step_ref() noexcept = default;

 private:
  template <class>
  friend struct detail::step_ref_access;
  friend class step_context;
  constexpr explicit step_ref(std::uint32_t i) noexcept : index_(i) {}
  std::uint32_t index_ = static_cast<std::uint32_t>(-1);
};

/// What an epilogue's `operator()(const step_context&)` is given: the step's views as this step
/// filled them, the step's number, and which of the threads running the epilogue this one is. On
/// CUDA every thread of one block (the last of the step's launch to finish) calls the epilogue;
/// on the host backend one call runs it (rank 0 of 1). Loop as
/// `for (i = ctx.rank(); i < n; i += ctx.threads())` and separate phases with ctx.sync().
class step_context {
 public:
  /// This thread's rank among threads().
  [[nodiscard]] FERRY_HOST_DEVICE unsigned rank() const noexcept { return rank_; }
  /// The threads that run the epilogue (together: every thread calls it once).
  [[nodiscard]] FERRY_HOST_DEVICE unsigned threads() const noexcept { return threads_; }
  /// A barrier among threads(): __syncthreads() on the device; nothing on the host.
  FERRY_HOST_DEVICE void sync() const noexcept {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  /// This step's number: the submits of the batch before it.
  [[nodiscard]] FERRY_HOST_DEVICE std::uint64_t step() const noexcept { return step_; }
  /// The view `r` refers to as this step filled it: an upload's destination[0, n) or a gather's
  /// dst[0, n) for this step's n (device memory), a publish's n elements in the step's slot
  /// (pinned host memory: read it, never write it).
  template <class T>
  [[nodiscard]] FERRY_HOST_DEVICE device_span<T> view(step_ref<T> r) const noexcept {
    const detail::step_view_entry e = views_[r.index_];
    return {reinterpret_cast<T*>(e.data), static_cast<std::size_t>(e.size)};
  }
  /// The elements of the view `r` refers to this step.
  template <class T>
  [[nodiscard]] FERRY_HOST_DEVICE std::size_t size(step_ref<T> r) const noexcept {
    return static_cast<std::size_t>(views_[r.index_].size);
  }

  /// Made by the step's launch (device) or host task: `views` are the step's view entries.
  FERRY_HOST_DEVICE step_context(const detail::step_view_entry* views, std::uint64_t step, unsigned rank,
                                 unsigned threads) noexcept
      : views_(views), step_(step), rank_(rank), threads_(threads) {}

 private:
  const detail::step_view_entry* views_;
  std::uint64_t step_;
  unsigned rank_, threads_;
};

namespace detail {
/// Whether F (void: none) is an epilogue: callable as `f(ctx)` on a const F.
template <class F>
constexpr bool step_epilogue_callable() {
  if constexpr (std::is_void_v<F>)
    return true;
  else
    return std::is_invocable_v<const F&, const step_context&>;
}
/// How step_batch makes references: `make(i)` refers to view entry i.
template <class T>
struct step_ref_access {
  static constexpr step_ref<T> make(std::uint32_t i) noexcept { return step_ref<T>(i); }
};
}  // namespace detail

}  // namespace ferry
