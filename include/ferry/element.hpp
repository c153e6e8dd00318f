// ferry/element.hpp: which element types ferry moves, the dtype rule, the scalar rule, and
// ferry::cast<T>(range), the explicit conversion.
#pragma once

#include <ferry/config.hpp>

#include <concepts>
#include <cstddef>
#include <ranges>
#include <type_traits>

#if FERRY_HAS_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define FERRY_HAS_HALF 1
#else
#define FERRY_HAS_HALF 0
#endif

namespace ferry {

namespace detail {

template <class T>
inline constexpr bool is_half_type = false;
#if FERRY_HAS_HALF
template <>
inline constexpr bool is_half_type<__half> = true;
template <>
inline constexpr bool is_half_type<__nv_bfloat16> = true;
#endif

template <class T>
inline constexpr bool is_arithmetic_element =
    std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && std::is_trivially_copyable_v<T> &&
    (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);

}  // namespace detail

/// An element type ferry moves: a trivially copyable arithmetic type of 1, 2, 4 or 8 bytes
/// (bool excluded), or __half / __nv_bfloat16 where the CUDA headers are available.
template <class T>
concept element = detail::is_arithmetic_element<std::remove_cv_t<T>> ||
                  detail::is_half_type<std::remove_cv_t<T>>;

/// Source and destination element types are the same for ferry's dtype rule: the same type, or
/// integral types of the same size and signedness (long and long long).
template <class Src, class Dst>
inline constexpr bool same_element_v =
    std::is_same_v<std::remove_cv_t<Src>, std::remove_cv_t<Dst>> ||
    (std::is_integral_v<Src> && std::is_integral_v<Dst> && !std::is_same_v<Src, bool> &&
     !std::is_same_v<Dst, bool> && sizeof(Src) == sizeof(Dst) &&
     std::is_signed_v<Src> == std::is_signed_v<Dst>);

/// A scalar of type From may initialize an element of type To without losing value: the same
/// element type, widening within integers of the same signedness, or widening within floating
/// point (__half and __nv_bfloat16 widen to float and double).
template <class From, class To>
inline constexpr bool value_preserving_v = [] {
  using F = std::remove_cv_t<From>;
  using T = std::remove_cv_t<To>;
  if constexpr (same_element_v<F, T>) {
    return true;
  } else if constexpr (std::is_integral_v<F> && std::is_integral_v<T>) {
    return !std::is_same_v<F, bool> && !std::is_same_v<T, bool> &&
           std::is_signed_v<F> == std::is_signed_v<T> && sizeof(F) <= sizeof(T);
  } else if constexpr (std::is_floating_point_v<F> && std::is_floating_point_v<T>) {
    return sizeof(F) <= sizeof(T);
  } else if constexpr (detail::is_half_type<F> && std::is_floating_point_v<T>) {
    return true;
  } else {
    return false;
  }
}();

namespace detail {

template <class T>
constexpr void check_element() {
  static_assert(element<T>,
                "ferry: unsupported element type; ferry moves trivially copyable arithmetic types "
                "of 1, 2, 4 or 8 bytes (bool excluded), __half and __nv_bfloat16.");
}

// The dtype rule at the point where a source range meets a typed destination.
template <class Src, class Dst>
constexpr void check_same_element() {
  static_assert(same_element_v<Src, Dst>,
                "ferry: the source's element type differs from the destination's element type, "
                "and ferry never converts silently; convert explicitly with "
                "ferry::cast<T>(range).");
}

template <class From, class To>
constexpr void check_scalar() {
  static_assert(value_preserving_v<From, To>,
                "ferry: this scalar conversion to the element type could lose value (narrowing, a "
                "signedness change, or integer/floating-point mixing); pass a value of the element "
                "type, e.g. static_cast<T>(value).");
}

template <class T>
struct cast_fn {
  template <class U>
  constexpr T operator()(U&& u) const {
    return static_cast<T>(static_cast<U&&>(u));
  }
};

}  // namespace detail

/// The explicit element conversion: a view of `range` whose elements are static_cast to T.
template <element T, std::ranges::viewable_range R>
[[nodiscard]] constexpr auto cast(R&& range) {
  return std::views::transform(static_cast<R&&>(range), detail::cast_fn<T>{});
}

}  // namespace ferry
