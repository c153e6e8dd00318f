// ferry/transfer/async_d2h.hpp: async_d2h, device data back into pinned host memory without
// blocking the host (SPEC §5).
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_span.hpp>
#include <ferry/transfer/detail/source.hpp>

#include <cstddef>
#include <type_traits>

namespace ferry {

/// Enqueues on `s` the copy of `src` into the prefix of `out`, and returns that prefix
/// (`out.first(src.size())`). Never blocks the host: the returned span may be read once `s` has
/// passed the copy (record a ferry::event after the call and wait for it, or synchronize `s`).
/// `out` is pinned by type, so the copy is a real asynchronous DMA. Element types follow the dtype
/// rule. `src` must stay unmodified and `out` valid until `s` has passed the copy.
///
/// Errors: `out` smaller than `src` → std::out_of_range, nothing enqueued; an empty `src`
/// enqueues nothing and returns `out.first(0)`.
template <class U, class T, class B>
pinned_span<T> async_d2h(device_span<U> src, pinned_span<T> out, stream_ref<B> s) {
  detail::check_same_element<std::remove_cv_t<U>, T>();
  detail::check_element<T>();
  static_assert(!std::is_const_v<T>,
                "ferry: async_d2h writes into out, so out must be a pinned_span of non-const "
                "elements.");
  using ops = detail::backend_ops<B>;
  ops::check_stream(s, ops::current_device());
  const std::size_t n = src.size();
  const std::size_t bytes = detail::fitting_bytes<T>("async_d2h", n, out.size());
  if (n == 0) return out.first(0);
  ops::copy_async(out.data(), src.data(), bytes, s);
  return out.first(n);
}

/// 0, NULL or nullptr in the stream's place: ferry has no default stream (a compile error).
template <class Src, class Out, detail::null_stream_argument Z>
auto async_d2h(Src&&, Out&&, Z) {
  static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  return detail::no_default_stream{};
}

}  // namespace ferry
