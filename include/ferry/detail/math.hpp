// ferry/detail/math.hpp: rounding arithmetic, written once: CCCL's cuda::ceil_div and
// cuda::round_up where <cuda/cmath> provides them (powers of two: std::bit_ceil, <bit>).
#pragma once

#include <cstddef>
#include <limits>

#if __has_include(<cuda/cmath>)
#include <cuda/cmath>
#endif
#if defined(CCCL_MAJOR_VERSION) && CCCL_MAJOR_VERSION >= 3
#define FERRY_HAS_CCCL_CMATH 1
#else
#define FERRY_HAS_CCCL_CMATH 0
#endif

namespace ferry::detail {

/// a / b rounded up (b > 0). Wrap-free: exact for every a, SIZE_MAX included (no a + b - 1).
constexpr std::size_t ceil_div(std::size_t a, std::size_t b) noexcept {
#if FERRY_HAS_CCCL_CMATH
  return ::cuda::ceil_div(a, b);
#else
  return a / b + (a % b != 0);
#endif
}

/// The smallest multiple of b at or above a (b > 0; the result must fit in size_t).
constexpr std::size_t round_up(std::size_t a, std::size_t b) noexcept {
#if FERRY_HAS_CCCL_CMATH
  return ::cuda::round_up(a, b);
#else
  return ceil_div(a, b) * b;
#endif
}

/// round_up(a, b) into `out`, or false (out untouched) when it does not fit in size_t.
[[nodiscard]] constexpr bool round_up_fits(std::size_t a, std::size_t b, std::size_t& out) noexcept {
  if (a > std::numeric_limits<std::size_t>::max() - (b - 1)) return false;
  out = round_up(a, b);
  return true;
}

}  // namespace ferry::detail
