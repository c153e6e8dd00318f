// ferry/transfer/async_h2d_packed.hpp: async_h2d_packed, several host ranges gathered into one
// staging block and sent by one copy (SPEC §5).
#pragma once

#include <ferry/backend/detail/backend_ops.hpp>
#include <ferry/backend/stream.hpp>
#include <ferry/detail/checked.hpp>
#include <ferry/detail/math.hpp>
#include <ferry/element.hpp>
#include <ferry/memory/device_span.hpp>
#include <ferry/memory/pinned_arena.hpp>
#include <ferry/transfer/async_h2d.hpp>
#include <ferry/transfer/detail/source.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ranges>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ferry {

/// The alignment of each part within a `device_span<std::byte>` packed upload:
/// max(alignof(element), packed_part_alignment) bytes from out's base, which must itself be
/// aligned to it.
inline constexpr std::size_t packed_part_alignment = 16;

namespace detail {

template <class Src>
constexpr void check_packed_source() {
  static_assert(countable_source<Src>,
                "ferry: async_h2d_packed needs every source's size before it copies (a sized or "
                "forward range); gather a single-pass range into a container first, or upload it "
                "alone with ferry::async_h2d.");
}

template <class Pin, class... Srcs>
constexpr void check_packed_pin() {
  if constexpr (Pin::pageable == pageable_source::reject) (check_pinned_source<Srcs>(), ...);
}

/// Gathers the parts (at `offsets`, `counts`) of every source into one arena block and sends
/// [0, total) of it to `dst` in one copy. `zero_gaps`: zero the padding between parts.
template <class Pin, class B, class... Elems, class... Srcs>
void packed_send(std::byte* dst, std::size_t total, const std::size_t* offsets,
                 const std::size_t* counts, stream_ref<B> s, pinned_arena<B>& arena,
                 std::tuple<Elems*...>, Srcs&... srcs) {
  block_guard<B> guard(arena, arena.acquire(total));
  std::byte* base = guard.get().data;
  std::size_t i = 0;
  std::size_t end = 0;
  auto one = [&]<class E, class S>(E*, S& src) {
    if (offsets[i] > end) std::memset(base + end, 0, offsets[i] - end);
    fill(src, reinterpret_cast<E*>(base + offsets[i]), counts[i]);
    end = offsets[i] + checked_bytes(counts[i], sizeof(E), "async_h2d_packed");
    ++i;
  };
  (one(static_cast<Elems*>(nullptr), srcs), ...);
  send_block<Pin>(guard.release(), total, device_span<std::byte>(dst, total), s, arena);
}

}  // namespace detail

/// Uploads several host ranges in one copy: every source is gathered (memcpy when contiguous)
/// into one block of `arena` and the block is sent by one asynchronous copy into `out`.
/// Returns one device_span per source, in order, viewing its part of `out`.
///
/// Typed `out` (`device_span<T>`): every source's element type matches T by the dtype rule; the
/// parts are contiguous (part k starts where part k-1 ends).
/// Byte `out` (`device_span<std::byte>`): sources of any element types; part k is a
/// `device_span<E_k>` starting at the next offset aligned to max(alignof(E_k), 16) from out's
/// base (padding between parts is written with zeros); out's base must be 16-byte aligned, else
/// std::invalid_argument.
///
/// Sources: sized or forward std::ranges ranges (their sizes are needed first). PinPolicy as for
/// async_h2d: `pin::stage` (default) never blocks the host; `pin::require` accepts only
/// pinned_span sources (they are gathered too, so that one copy carries them all);
/// `pin::allow_sync` sends the block with a host-blocking copy. Source lifetime: every source has
/// been consumed when the call returns. `out` must stay valid until `s` has passed the copy.
///
/// Errors: not enough room in `out` (also for sources whose bytes overflow size_t) →
/// std::out_of_range, nothing enqueued; all sources empty →
/// nothing enqueued (empty spans returned). The arena's cap → ferry::capacity_error, nothing
/// enqueued.
template <class... Policies, class T, class B, class... Srcs>
  requires(sizeof...(Srcs) > 0 && (std::ranges::input_range<Srcs> && ...))
[[nodiscard]] auto async_h2d_packed(device_span<T> out, stream_ref<B> s, pinned_arena<B>& arena,
                      Srcs&&... srcs) {
  using pin_policy = detail::transfer_pin_t<Policies...>;
  using ops = detail::backend_ops<B>;
  constexpr std::size_t N = sizeof...(Srcs);
  constexpr bool bytes_out = std::is_same_v<std::remove_cv_t<T>, std::byte>;
  if constexpr (!bytes_out) {
    (detail::check_same_element<detail::source_element_t<Srcs>, T>(), ...);
    detail::check_element<T>();
  } else {
    (detail::check_element<detail::source_element_t<Srcs>>(), ...);
  }
  static_assert(!std::is_const_v<T>,
                "ferry: async_h2d_packed writes into out, so out must be a device_span of "
                "non-const elements.");
  (detail::check_packed_source<Srcs>(), ...);
  detail::check_packed_pin<pin_policy, Srcs...>();
  ops::check_stream(s, ops::current_device());

  if constexpr (bytes_out) {
    if (reinterpret_cast<std::uintptr_t>(out.data()) % packed_part_alignment != 0)
      throw std::invalid_argument(
          "ferry: async_h2d_packed: a device_span<std::byte> out must start at a 16-byte "
          "aligned address (parts are aligned to max(alignof, 16) from it)");
  }

  // Sizes and offsets (bytes from out's base) of every part.
  std::array<std::size_t, N> counts{detail::count_of(srcs)...};
  std::array<std::size_t, N> offsets{};
  constexpr std::array<std::size_t, N> elem_size{sizeof(detail::source_element_t<Srcs>)...};
  constexpr std::array<std::size_t, N> align{
      std::max(alignof(detail::source_element_t<Srcs>), packed_part_alignment)...};
  // Checked: a part whose bytes (or whose end) overflow size_t cannot fit in any out.
  std::size_t end = 0;
  bool fits = true;
  for (std::size_t k = 0; k < N && fits; ++k) {
    std::size_t part = 0;
    if constexpr (bytes_out) {
      fits = detail::round_up_fits(end, align[k], offsets[k]);
    } else {
      offsets[k] = end;
    }
    fits = fits && detail::mul_fits(counts[k], elem_size[k], part) &&
           detail::add_fits(offsets[k], part, end);
  }
  const std::size_t room = detail::checked_bytes(out.size(), sizeof(T), "async_h2d_packed: out");
  if (!fits || end > room)
    throw std::out_of_range("ferry: async_h2d_packed: the sources need " +
                            (fits ? std::to_string(end) : std::string("more than SIZE_MAX")) +
                            " bytes of out (parts and alignment) but out has " +
                            std::to_string(room) + "; nothing was enqueued");

  if (end != 0) {
    using elems = std::conditional_t<bytes_out, std::tuple<detail::source_element_t<Srcs>*...>,
                                     std::tuple<std::conditional_t<true, T, Srcs>*...>>;
    detail::packed_send<pin_policy>(reinterpret_cast<std::byte*>(out.data()), end, offsets.data(),
                                    counts.data(), s, arena, elems{}, srcs...);
  }

  auto* base = reinterpret_cast<std::byte*>(out.data());
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    if constexpr (bytes_out)
      return std::tuple<device_span<detail::source_element_t<Srcs>>...>{
          device_span<detail::source_element_t<Srcs>>(
              reinterpret_cast<detail::source_element_t<Srcs>*>(base + offsets[K]), counts[K])...};
    else
      return std::tuple<device_span<std::conditional_t<true, T, Srcs>>...>{
          device_span<T>(reinterpret_cast<T*>(base + offsets[K]), counts[K])...};
  }(std::index_sequence_for<Srcs...>{});
}

/// async_h2d_packed staging through default_arena<B>().
template <class... Policies, class T, class B, class... Srcs>
  requires(sizeof...(Srcs) > 0 && (std::ranges::input_range<Srcs> && ...))
[[nodiscard]] auto async_h2d_packed(device_span<T> out, stream_ref<B> s, Srcs&&... srcs) {
  return async_h2d_packed<Policies...>(out, s, default_arena<B>(), static_cast<Srcs&&>(srcs)...);
}

/// 0, NULL or nullptr in the stream's place: ferry has no default stream (a compile error).
template <class... Policies, class Out, detail::null_stream_argument Z, class... Rest>
auto async_h2d_packed(Out&&, Z, Rest&&...) {
  static_assert(detail::dependent_false<Z>, FERRY_NO_DEFAULT_STREAM);
  return detail::no_default_stream{};
}

}  // namespace ferry
