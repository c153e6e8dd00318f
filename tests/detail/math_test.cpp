// Tests of include/ferry/detail/math.hpp, ferry-internal: the rounding arithmetic every component
// shares (CCCL's cuda::ceil_div / cuda::round_up where present, the same results without them).
#include <ferry/detail/math.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <limits>
#include <random>

using ferry::detail::ceil_div;
using ferry::detail::round_up;
using ferry::detail::round_up_fits;

static_assert(ceil_div(0, 7) == 0 && ceil_div(1, 7) == 1 && ceil_div(7, 7) == 1 && ceil_div(8, 7) == 2);
static_assert(round_up(0, 16) == 0 && round_up(1, 16) == 16 && round_up(16, 16) == 16 &&
              round_up(17, 16) == 32 && round_up(10, 3) == 12);

TEST_CASE("ceil_div and round_up agree with their definitions", "[math]") {
  std::mt19937_64 rng(41);
  for (int i = 0; i < 10000; ++i) {
    const std::size_t b = 1 + rng() % 4096;
    const std::size_t a = rng() % (std::size_t{1} << 40);
    const std::size_t q = ceil_div(a, b);
    CHECK(q * b >= a);
    CHECK((q == 0 || (q - 1) * b < a));
    CHECK(round_up(a, b) == q * b);
  }
}

TEST_CASE("ceil_div is exact up to SIZE_MAX (no a + b - 1 to wrap)", "[math]") {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  CHECK(ceil_div(max, 1) == max);
  CHECK(ceil_div(max, 2) == max / 2 + 1);
  CHECK(ceil_div(max - 1, max) == 1);
  CHECK(ceil_div(max, max) == 1);
}

TEST_CASE("round_up_fits refuses a result beyond size_t and leaves out untouched", "[math]") {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  std::size_t out = 5;
  CHECK(round_up_fits(max - 15, 16, out));  // max - 15 is a multiple of 16
  CHECK(out == max - 15);
  out = 5;
  CHECK_FALSE(round_up_fits(max - 14, 16, out));
  CHECK(out == 5);
  CHECK(round_up_fits(max, 1, out));
  CHECK(out == max);
  CHECK(round_up_fits(33, 16, out));
  CHECK(out == 48);
}
