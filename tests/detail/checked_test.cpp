// Tests of include/ferry/detail/checked.hpp, ferry-internal: size arithmetic that throws instead
// of wrapping.
#include <ferry/detail/checked.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

using ferry::detail::checked_round_up;

TEST_CASE("checked_round_up rounds up, and throws the given type where size_t cannot hold it",
          "[checked]") {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  CHECK(checked_round_up(0, 256, "x") == 0);
  CHECK(checked_round_up(1, 256, "x") == 256);
  CHECK(checked_round_up(256, 256, "x") == 256);
  CHECK(checked_round_up(max - 255, 256, "x") == max - 255);  // max - 255 is a multiple of 256
  CHECK_THROWS_MATCHES(checked_round_up(max - 254, 256, "a table"), std::invalid_argument,
                       Catch::Matchers::Message("ferry: a table: " + std::to_string(max - 254) +
                                                " rounded up to a multiple of 256 overflows size_t"));
  CHECK_THROWS_AS(checked_round_up<std::out_of_range>(max, 2, "x"), std::out_of_range);
}
