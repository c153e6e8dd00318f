// Tests for include/ferry/transfer/async_d2h.hpp: device data back into pinned memory against the
// reference for every element type, readable once the stream passed the copy, bad sizes enqueue
// nothing.
#include "transfer_support.hpp"

#include <catch2/catch_template_test_macros.hpp>

#include <vector>

TEMPLATE_TEST_CASE("async_d2h returns the prefix of out with the device contents",
                   "[transfer][d2h]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::uint64_t seed = 1;
  ferry_test::for_each_element_type([&]<class T>() {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, 4096 / sizeof(T),
                          (std::size_t{1} << 20) / sizeof(T)}) {
      CAPTURE(n, sizeof(T));
      const auto v = ferry_test::random_values<T>(n, seed++);
      ferry::device_buffer<T, TestType> d(n);
      ferry::async_h2d(v, d.span(), s);
      ferry::pinned_buffer<T, TestType> host(n + 2);
      const auto tail = ferry_test::random_values<T>(2, seed++);
      host.host()[n] = tail[0];
      host.host()[n + 1] = tail[1];
      auto got = ferry::async_d2h(ferry::device_span<const T>(d.span()), host.host(), s);
      s.synchronize();
      CHECK(got.data() == host.host().data());
      REQUIRE(got.size() == n);
      CHECK(std::equal(v.begin(), v.end(), got.begin()));
      CHECK(host.host()[n] == tail[0]);
      CHECK(host.host()[n + 1] == tail[1]);
    }
  });
}

TEMPLATE_TEST_CASE("async_d2h is readable once the stream passed the copy", "[transfer][d2h]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  const auto v = ferry_test::random_values<std::int64_t>(256, 7);
  ferry::device_buffer<std::int64_t, TestType> d(256);
  ferry::async_h2d(v, d.span(), s);
  ferry::pinned_buffer<std::int64_t, TestType> host(256);
  ferry::event<TestType> done;
  {
    ferry_test::gate<TestType> g(s);
    auto got = ferry::async_d2h(d.span(), host.host(), s);  // device_span<T> converts
    done.record(s);
    CHECK(got.size() == 256);
    CHECK_FALSE(done.ready());  // does not block, and has not run
  }
  done.synchronize();
  CHECK(std::equal(v.begin(), v.end(), host.host().begin()));
}

TEMPLATE_TEST_CASE("async_d2h into a too small out throws out_of_range and enqueues nothing",
                   "[transfer][d2h]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::device_buffer<float, TestType> d(10);
  ferry_test::fill_device(d.span(), ferry_test::random_values<float>(10, 9), s);
  ferry::pinned_buffer<float, TestType> host(9);
  const auto before = ferry_test::random_values<float>(9, 10);
  std::copy(before.begin(), before.end(), host.host().begin());
  const auto queued = ferry_test::enqueued<TestType>(s);
  CHECK_THROWS_AS(ferry::async_d2h(d.span(), host.host(), s), std::out_of_range);
  CHECK(ferry::async_d2h(d.span().first(0), host.host(), s).size() == 0);
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  s.synchronize();
  CHECK(std::equal(before.begin(), before.end(), host.host().begin()));
}
