// Tests of how default_copy_pool() is chosen (include/ferry/transfer/detail/copy_tuning.hpp): the
// choice from measured copy rates on the figures of real and synthetic hosts, the environment's
// overrides and their errors, the fallback when the measurement fails, and the measurement itself.
#include <ferry/transfer/detail/copy_tuning.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
using ferry::detail::choose_copy_config;
using ferry::detail::copy_config;
using ferry::detail::copy_rate;
using rates = std::vector<copy_rate>;
}  // namespace

TEST_CASE("copy pool choice: the fewest threads within 0.9x of the fastest team", "[transfer][pool][tuning]") {
  // The H200 host of bench.h2d (2026-12-03): the copy rate still grows at 16 threads (65.2 GB/s,
  // 12 threads 52.4 < 0.9 x 65.2): 16 threads, chunks of 16 MiB (65.2 GB/s x 250 µs = 15.5 MiB).
  const rates h200{{1, 7.4}, {2, 14.5}, {4, 27.9}, {8, 45.2}, {12, 52.4}, {16, 65.2}};
  CHECK(choose_copy_config(h200) == copy_config{16, 16 * MiB});
  // A host whose copy rate stops growing at 8 threads: 8, not the fastest team's 12; 46 GB/s x
  // 250 µs = 11.0 MiB, nearer 8 MiB than 16 MiB on a log scale.
  const rates flat{{1, 9.0}, {2, 17.5}, {4, 33.0}, {8, 46.0}, {12, 48.0}, {15, 47.0}};
  CHECK(choose_copy_config(flat) == copy_config{8, 8 * MiB});
  // Exactly 0.9x the fastest team qualifies.
  CHECK(choose_copy_config(rates{{2, 9.0}, {4, 10.0}}).threads == 2);
  CHECK(choose_copy_config(rates{{2, 8.99}, {4, 10.0}}).threads == 4);
  // The order of the measurements does not matter.
  const rates shuffled{{12, 52.4}, {2, 14.5}, {16, 65.2}, {1, 7.4}, {8, 45.2}, {4, 27.9}};
  CHECK(choose_copy_config(shuffled) == copy_config{16, 16 * MiB});
}

TEST_CASE("copy pool choice: chunks are powers of two within [4 MiB, 32 MiB]", "[transfer][pool][tuning]") {
  // A slow host: 3 threads at 10 GB/s copy 2.4 MiB in 250 µs, below the 4 MiB floor.
  CHECK(choose_copy_config(rates{{1, 3.5}, {2, 6.8}, {3, 10.0}}) == copy_config{3, 4 * MiB});
  // A fast host: 200 GB/s x 250 µs = 47.7 MiB, nearer 64 than 32 on a log scale: capped at 32 MiB.
  CHECK(choose_copy_config(rates{{16, 150.0}, {32, 200.0}}) == copy_config{32, 32 * MiB});
  // 100 GB/s: 23.8 MiB, nearer 32 MiB (ratio 1.34) than 16 MiB (1.49).
  CHECK(choose_copy_config(rates{{24, 100.0}}) == copy_config{24, 32 * MiB});
  for (double gbps : {0.5, 5.0, 20.0, 33.0, 50.0, 70.0, 130.0, 1000.0}) {
    const auto c = choose_copy_config(rates{{4, gbps}});
    CAPTURE(gbps);
    CHECK(std::has_single_bit(c.chunk_bytes));
    CHECK(c.chunk_bytes >= 4 * MiB);
    CHECK(c.chunk_bytes <= 32 * MiB);
  }
}

TEST_CASE("copy pool choice: a fixed thread count sizes the chunk by its own rate", "[transfer][pool][tuning]") {
  const rates h200{{1, 7.4}, {2, 14.5}, {4, 27.9}, {8, 45.2}, {12, 52.4}, {16, 65.2}};
  // 4 threads: 27.9 GB/s x 250 µs = 6.7 MiB -> 8 MiB.
  CHECK(choose_copy_config(h200, 4) == copy_config{4, 8 * MiB});
  // 6 threads were not measured: the largest team no larger (4) sizes the chunk.
  CHECK(choose_copy_config(h200, 6) == copy_config{6, 8 * MiB});
  // Fewer threads than any team measured: the smallest team (2 at 14.5 GB/s: 3.5 MiB -> 4 MiB).
  CHECK(choose_copy_config(rates{{2, 14.5}, {8, 45.2}}, 1) == copy_config{1, 4 * MiB});
}

TEST_CASE("copy pool choice: unusable measurements are ignored, none usable is an error", "[transfer][pool][tuning]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // A NaN, an infinite, a zero and a negative rate, and a team of 0 threads, beside real ones.
  CHECK(choose_copy_config(rates{{1, nan}, {2, 14.5}, {3, inf}, {4, 0.0}, {6, -5.0}, {0, 99.0}, {8, 45.2}}) ==
        copy_config{8, 8 * MiB});
  CHECK_THROWS_AS(choose_copy_config(rates{}), std::invalid_argument);
  CHECK_THROWS_WITH(choose_copy_config(rates{{1, nan}, {2, 0.0}}),
                    Catch::Matchers::StartsWith("ferry: ") && Catch::Matchers::ContainsSubstring("2 teams"));
}

TEST_CASE("default copy pool: the environment overrides, the measurement fills in, failures fall back",
          "[transfer][pool][tuning]") {
  using ferry::detail::resolve_copy_config;
  const copy_config fallback{12, 16 * MiB};
  const rates h200{{1, 7.4}, {2, 14.5}, {4, 27.9}, {8, 45.2}, {12, 52.4}, {16, 65.2}};
  int measured = 0;
  auto measure = [&] {
    ++measured;
    return h200;
  };
  // Nothing set: measured once, chosen.
  CHECK(resolve_copy_config(nullptr, nullptr, measure, fallback) == copy_config{16, 16 * MiB});
  CHECK(measured == 1);
  // Both set: no measurement.
  CHECK(resolve_copy_config("5", "8", measure, fallback) == copy_config{5, 8 * MiB});
  CHECK(measured == 1);
  // Threads set: the chunk from those threads' measured rate (4 threads: 8 MiB).
  CHECK(resolve_copy_config("4", nullptr, measure, fallback) == copy_config{4, 8 * MiB});
  // Chunk set: the threads chosen.
  CHECK(resolve_copy_config(nullptr, "64", measure, fallback) == copy_config{16, 64 * MiB});
  CHECK(measured == 3);
  // A measurement that throws, or gives nothing usable: the fallback fills in what is open.
  auto throws = []() -> rates { throw std::runtime_error("no threads"); };
  CHECK(resolve_copy_config(nullptr, nullptr, throws, fallback) == fallback);
  CHECK(resolve_copy_config("3", nullptr, throws, fallback) == copy_config{3, 16 * MiB});
  CHECK(resolve_copy_config(nullptr, nullptr, [] { return rates{{4, 0.0}}; }, fallback) == fallback);
  // Malformed values: std::invalid_argument naming the variable and the value.
  for (const char* bad : {"", "0", "-3", "12x", " 8", "1e3", "99999999999999999999999", "1025"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(resolve_copy_config(bad, nullptr, measure, fallback),
                      Catch::Matchers::StartsWith("ferry: FERRY_COPY_THREADS=\"" + std::string(bad) + "\""));
  }
  CHECK_THROWS_WITH(resolve_copy_config(nullptr, "0", measure, fallback),
                    Catch::Matchers::StartsWith("ferry: FERRY_COPY_CHUNK_MIB=\"0\""));
  CHECK_THROWS_AS(resolve_copy_config("4", "4097", measure, fallback), std::invalid_argument);
}

TEST_CASE("copy pool measurement: one rate per team up to the hardware threads less one", "[transfer][pool][tuning]") {
  using ferry::detail::measure_host_copy_rates;
  // Small copies (4 MiB through 1 MiB, one run each): the teams and positive rates, not the speed.
  auto teams = [](const rates& r) {
    std::vector<std::size_t> t;
    for (const auto& x : r) {
      t.push_back(x.threads);
      CHECK(std::isfinite(x.gbps));
      CHECK(x.gbps > 0);
    }
    return t;
  };
  CHECK(teams(measure_host_copy_rates(0, 4 * MiB, MiB, 1)) == std::vector<std::size_t>{1});
  CHECK(teams(measure_host_copy_rates(2, 4 * MiB, MiB, 1)) == std::vector<std::size_t>{1});
  CHECK(teams(measure_host_copy_rates(6, 4 * MiB, MiB, 1)) == std::vector<std::size_t>{1, 2, 4, 5});
  CHECK(teams(measure_host_copy_rates(9, 4 * MiB, MiB, 1)) == std::vector<std::size_t>{1, 2, 4, 8});
  // At most 32 threads, however many the host has.
  CHECK(teams(measure_host_copy_rates(64, 4 * MiB, MiB, 1)).back() == 32);
  // And what it measures is a choice.
  const auto c = choose_copy_config(measure_host_copy_rates(4, 4 * MiB, MiB, 1));
  CHECK(c.threads >= 1);
  CHECK(c.threads <= 3);
}
