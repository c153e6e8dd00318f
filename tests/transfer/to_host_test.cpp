// Tests for include/ferry/transfer/to_host.hpp: device data back into a std::vector in one call,
// equal to what was uploaded for every element type; it waits for the work enqueued before it,
// counts exactly one synchronization, gives its staging block back, rethrows the stream's pending
// error, and refuses a span no vector holds.
#include "transfer_support.hpp"

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

TEMPLATE_TEST_CASE("to_host returns the device contents as a vector", "[transfer][to_host]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::uint64_t seed = 31;
  ferry_test::for_each_element_type([&]<class T>() {
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1001}, 4096 / sizeof(T),
                          (std::size_t{1} << 20) / sizeof(T) + 3}) {
      CAPTURE(n, sizeof(T));
      const auto v = ferry_test::random_values<T>(n, seed++);
      ferry::device_buffer<T, TestType> d(n);
      ferry::async_h2d(v, d.span(), s);
      // A device_span<T> and a device_span<const T> both read back; no synchronize in between.
      const std::vector<T> got = ferry::to_host(d.span(), s);
      CHECK(got == v);
      const std::vector<T> got_const = ferry::to_host(ferry::device_span<const T>(d.span()).subspan(n / 2), s);
      CHECK(std::equal(got_const.begin(), got_const.end(), v.begin() + static_cast<std::ptrdiff_t>(n / 2), v.end()));
      CHECK(got_const.size() == n - n / 2);
    }
  });
}

TEMPLATE_TEST_CASE("to_host counts one synchronization and reuses its staging block",
                   "[transfer][to_host]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto v = ferry_test::random_values<std::int32_t>(5000, 9);
  ferry::device_buffer<std::int32_t, TestType> d(v.size());
  ferry::async_h2d(v, d.span(), s, arena);
  s.synchronize();
  for (int round = 0; round < 3; ++round) {
    const auto before = ferry::backend_stats_of<TestType>().synchronizations;
    CHECK(ferry::to_host(d.span(), s, arena) == v);
    CHECK(ferry::backend_stats_of<TestType>().synchronizations == before + 1);
  }
  // One block: the upload's, passed before the first to_host, then reused by each to_host and
  // given back every time (none left handed out).
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(arena.stats().allocations == 1);
  CHECK(arena.stats().reuses == 3);

  const auto before = ferry::backend_stats_of<TestType>().synchronizations;
  CHECK(ferry::to_host(ferry::device_span<const std::int32_t>(), s, arena).empty());
  CHECK(ferry::backend_stats_of<TestType>().synchronizations == before + 1);  // an empty span waits too
}

TEMPLATE_TEST_CASE("to_host waits for the work enqueued before it", "[transfer][to_host]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  const auto first = ferry_test::random_values<std::int64_t>(777, 3);
  const auto second = ferry_test::random_values<std::int64_t>(777, 4);
  ferry::device_buffer<std::int64_t, TestType> d(first.size());
  ferry::async_h2d(first, d.span(), s);
  std::vector<std::int64_t> got;
  std::atomic<bool> returned{false};
  {
    ferry_test::gate<TestType> g(s);
    ferry::async_h2d(second, d.span(), s);  // behind the gate: not run yet
    std::thread reader([&] {
      got = ferry::to_host(d.span(), s);
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(returned.load());  // blocked behind the gate
    g.open();
    reader.join();
  }
  CHECK(returned.load());
  CHECK(got == second);
}

TEMPLATE_TEST_CASE("to_host rethrows an error of earlier stream work and keeps the arena whole",
                   "[transfer][to_host]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const auto v = ferry_test::random_values<float>(300, 5);
  ferry::device_buffer<float, TestType> d(v.size());
  ferry::async_h2d(v, d.span(), s, arena);
  ferry::enqueue_host(s, [] { throw std::runtime_error("stream work failed"); });
  CHECK_THROWS_AS(ferry::to_host(d.span(), s, arena), std::runtime_error);
  s.synchronize();  // the error was taken once
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(ferry::to_host(d.span(), s, arena) == v);
}

// A span of more elements than a std::vector<T> holds (2^62 int32: max_size() is 2^61 - 1) is
// refused before anything is staged or enqueued, with ferry's message (std::vector's own
// std::length_error once escaped); the span is never read.
TEMPLATE_TEST_CASE("to_host refuses a span larger than any vector holds, enqueuing nothing",
                   "[transfer][to_host][bad_input]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::device_buffer<std::int32_t, TestType> d(1);
  const ferry::device_span<const std::int32_t> huge(d.span().data(), std::size_t{1} << 62);
  const auto stats = arena.stats();
  const auto tasks = ferry_test::enqueued<TestType>(s);
  CHECK_THROWS_AS(ferry::to_host(huge, s, arena), std::invalid_argument);
  CHECK_THROWS_WITH(ferry::to_host(huge, s, arena),
                    Catch::Matchers::StartsWith("ferry: to_host: a span of 4611686018427387904 elements"));
  CHECK(ferry_test::enqueued<TestType>(s) == tasks);
  CHECK(arena.stats().allocations == stats.allocations);
  CHECK(arena.stats().bytes_in_use == 0);
}
