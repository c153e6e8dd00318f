// ferry/detail/checked.hpp: size arithmetic that cannot wrap. Every element count that becomes a
// byte count, and every sum of sizes, goes through these, so a huge request fails loudly instead
// of becoming a small allocation.
#pragma once

#include <ferry/config.hpp>
#include <ferry/detail/math.hpp>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

namespace ferry::detail {

/// a * b, or false when it does not fit in size_t.
[[nodiscard]] constexpr bool mul_fits(std::size_t a, std::size_t b, std::size_t& out) noexcept {
  return !__builtin_mul_overflow(a, b, &out);
}
/// a + b, or false when it does not fit in size_t.
[[nodiscard]] constexpr bool add_fits(std::size_t a, std::size_t b, std::size_t& out) noexcept {
  return !__builtin_add_overflow(a, b, &out);
}

/// Throws E: `what` of n elements of elem_bytes bytes overflows size_t.
template <class E>
[[noreturn]] FERRY_COLD void throw_bytes_overflow(std::size_t n, std::size_t elem_bytes, const char* what) {
  throw E(std::string("ferry: ") + what + " of " + std::to_string(n) + " elements of " +
          std::to_string(elem_bytes) + " bytes overflows size_t");
}
/// Throws E: `what`, a `op` b, overflows size_t.
template <class E>
[[noreturn]] FERRY_COLD void throw_overflow(std::size_t a, const char* op, std::size_t b, const char* what) {
  throw E(std::string("ferry: ") + what + ": " + std::to_string(a) + op + std::to_string(b) +
          " overflows size_t");
}

/// The bytes of `n` elements of `elem_bytes` each; throws E naming `what` when that overflows.
template <class E = std::invalid_argument>
std::size_t checked_bytes(std::size_t n, std::size_t elem_bytes, const char* what) {
  std::size_t bytes = 0;
  if (!mul_fits(n, elem_bytes, bytes)) [[unlikely]]
    throw_bytes_overflow<E>(n, elem_bytes, what);
  return bytes;
}

/// a + b; throws E naming `what` when that overflows.
template <class E = std::invalid_argument>
std::size_t checked_add(std::size_t a, std::size_t b, const char* what) {
  std::size_t sum = 0;
  if (!add_fits(a, b, sum)) [[unlikely]]
    throw_overflow<E>(a, " + ", b, what);
  return sum;
}

/// a rounded up to a multiple of b (b > 0); throws E naming `what` when that overflows.
template <class E = std::invalid_argument>
std::size_t checked_round_up(std::size_t a, std::size_t b, const char* what) {
  std::size_t up = 0;
  if (!round_up_fits(a, b, up)) [[unlikely]]
    throw_overflow<E>(a, " rounded up to a multiple of ", b, what);
  return up;
}

}  // namespace ferry::detail
