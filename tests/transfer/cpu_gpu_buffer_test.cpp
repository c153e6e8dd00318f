// Tests for include/ferry/transfer/cpu_gpu_buffer.hpp: event_fenced snapshots host() (rewritten at
// once behind a gated stream, the device still receives the old values), caller_fenced copies in
// place, copy_to_host's event, bad sizes enqueue nothing, policies in any order, moves.
#include "transfer_support.hpp"

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using ferry_test::read_back;

TEMPLATE_TEST_CASE("event_fenced: host() may be rewritten as soon as copy_to_device returns",
                   "[transfer][cpu_gpu_buffer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::cpu_gpu_buffer<std::int32_t, TestType, ferry::reuse::event_fenced> buf(1000, arena);
  CHECK(buf.size() == 1000);
  const auto old_values = ferry_test::random_values<std::int32_t>(1000, 1);
  const auto new_values = ferry_test::random_values<std::int32_t>(1000, 2);
  std::copy(old_values.begin(), old_values.end(), buf.host().begin());
  ferry::device_span<std::int32_t> got;
  {
    ferry_test::gate<TestType> g(s);
    got = buf.copy_to_device(700, s);
    std::copy(new_values.begin(), new_values.end(), buf.host().begin());  // at once
  }
  CHECK(got.data() == buf.device().data());
  CHECK(got.size() == 700);
  const auto dev = read_back(got, s);
  CHECK(std::equal(dev.begin(), dev.end(), old_values.begin()));
  CHECK(arena.stats().bytes_in_use == 0);
  // And the next copy sends the new values.
  buf.copy_to_device(1000, s);
  CHECK(read_back(buf.device(), s) == new_values);
}

TEMPLATE_TEST_CASE("caller_fenced copies host() in place", "[transfer][cpu_gpu_buffer]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::cpu_gpu_buffer<double, ferry::reuse::caller_fenced, TestType> buf(513, arena);
  const auto v = ferry_test::random_values<double>(513, 3);
  std::copy(v.begin(), v.end(), buf.host().begin());
  buf.copy_to_device(513, s);
  s.synchronize();  // the caller's fence before rewriting host()
  CHECK(arena.stats().allocations == 0);  // no staging
  CHECK(read_back(buf.device(), s) == v);
}

TEMPLATE_TEST_CASE("copy_to_host returns the event after which host() may be read",
                   "[transfer][cpu_gpu_buffer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::cpu_gpu_buffer<std::uint8_t, TestType> buf(4096);
  const auto v = ferry_test::random_values<std::uint8_t>(4096, 4);
  ferry::async_h2d(v, buf.device(), s);
  ferry::event<TestType> done;
  {
    ferry_test::gate<TestType> g(s);
    done = buf.copy_to_host(4000, s);
    CHECK_FALSE(done.ready());
  }
  done.synchronize();
  CHECK(std::equal(v.begin(), v.begin() + 4000, buf.host().begin()));
  CHECK(buf.host()[4000] == 0);  // beyond n: untouched (zero-filled)
  CHECK(buf.copy_to_host(0, s).ready());
}

TEMPLATE_TEST_CASE("cpu_gpu_buffer: n beyond size throws out_of_range and enqueues nothing",
                   "[transfer][cpu_gpu_buffer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  ferry::cpu_gpu_buffer<float, TestType> buf(10, arena);
  const auto dev_before = ferry_test::random_values<float>(10, 5);
  ferry_test::fill_device(buf.device(), dev_before, s);
  const auto host_before = ferry_test::random_values<float>(10, 6);
  std::copy(host_before.begin(), host_before.end(), buf.host().begin());
  const auto queued = ferry_test::enqueued<TestType>(s);
  const auto st = arena.stats();
  CHECK_THROWS_AS(buf.copy_to_device(11, s), std::out_of_range);
  CHECK_THROWS_AS(buf.copy_to_host(11, s), std::out_of_range);
  CHECK(buf.copy_to_device(0, s).size() == 0);
  CHECK(ferry_test::enqueued<TestType>(s) == queued);
  CHECK(ferry_test::same_stats(arena.stats(), st));
  CHECK(read_back(buf.device(), s) == dev_before);
  CHECK(std::equal(host_before.begin(), host_before.end(), buf.host().begin()));
}

TEMPLATE_TEST_CASE("cpu_gpu_buffer of a size whose bytes overflow size_t allocates nothing",
                   "[transfer][cpu_gpu_buffer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::StartsWith;
  ferry::pinned_arena<TestType> arena;
  const auto before = ferry::backend_stats_of<TestType>();
  for (std::size_t n : {std::size_t{1} << 61, (std::size_t{1} << 61) + 1}) {
    CAPTURE(n);
    CHECK_THROWS_MATCHES((ferry::cpu_gpu_buffer<std::int64_t, TestType>(n, arena)),
                         std::invalid_argument,
                         Catch::Matchers::MessageMatches(StartsWith("ferry: ") &&
                                                         ContainsSubstring(std::to_string(n))));
  }
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.pinned_allocations == before.pinned_allocations);
  CHECK(after.device_allocations == before.device_allocations);
}

TEMPLATE_TEST_CASE("a cpu_gpu_buffer destroyed while its copies are queued waits for them",
                   "[transfer][cpu_gpu_buffer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  const std::size_t n = 4096;
  const auto values = ferry_test::random_values<std::int64_t>(n, 81);
  ferry::pinned_buffer<std::int64_t, TestType> seen(n);
  struct on_destroy {
    std::promise<void> done;
    ~on_destroy() { done.set_value(); }
  };
  struct holder {        // members are destroyed in reverse order:
    on_destroy freed;    // last: once the buffer's destructor has returned
    ferry::cpu_gpu_buffer<std::int64_t, TestType> buf;
    on_destroy dying;    // first: as the buffer's destruction begins
  };
  std::unique_ptr<holder> h(new holder{{}, ferry::cpu_gpu_buffer<std::int64_t, TestType>(n, arena), {}});
  std::copy(values.begin(), values.end(), h->buf.host().begin());
  std::optional<ferry::event<TestType>> host_done;
  bool freed_behind_closed_gate = false;
  {
    ferry_test::gate<TestType> g(s);
    h->buf.copy_to_device(n, s);
    std::fill(h->buf.host().begin(), h->buf.host().end(), -1);  // snapshotted: rewritable now
    ferry::async_d2h(h->buf.device(), seen.host(), s);
    host_done.emplace(h->buf.copy_to_host(n, s));
    // The gate opens once the buffer is being destroyed. Its frees wait for the queued copies, so
    // its destructor cannot return first (frees that did not wait returned at once).
    std::thread opener([&g, &freed_behind_closed_gate, dying = h->dying.done.get_future(),
                        freed = h->freed.done.get_future()] {
      dying.wait();
      freed_behind_closed_gate =
          freed.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready;
      g.open();
    });
    h.reset();
    opener.join();
  }
  CHECK_FALSE(freed_behind_closed_gate);
  CHECK(host_done->ready());
  s.synchronize();
  CHECK(std::equal(values.begin(), values.end(), seen.host().begin()));
  CHECK(arena.stats().bytes_in_use == 0);
}

TEMPLATE_TEST_CASE("cpu_gpu_buffer moves and keeps its views", "[transfer][cpu_gpu_buffer]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::cpu_gpu_buffer<std::int64_t, TestType> a(64);
  const auto h = a.host();
  const auto d = a.device();
  auto b = std::move(a);
  CHECK(b.host().data() == h.data());
  CHECK(b.device().data() == d.data());
  CHECK(a.size() == 0);
  const auto v = ferry_test::random_values<std::int64_t>(64, 7);
  std::copy(v.begin(), v.end(), b.host().begin());
  b.copy_to_device(64, s);
  CHECK(read_back(b.device(), s) == v);
}

TEMPLATE_TEST_CASE("steady state: cpu_gpu_buffer copies allocate nothing and never synchronize",
                   "[transfer][cpu_gpu_buffer]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::pinned_arena<TestType> arena;
  arena.reserve(4096, 32);
  ferry::cpu_gpu_buffer<std::int32_t, TestType> buf(1024, arena);
  ferry::event<TestType> e;
  const auto backend = ferry::backend_stats_of<TestType>();
  for (int i = 0; i < 1000; ++i) {
    buf.host()[0] = i;
    buf.copy_to_device(1024, s);
    if (i % 16 == 15) {
      e.record(s);
      while (!e.ready()) std::this_thread::yield();
    }
  }
  const auto after = ferry::backend_stats_of<TestType>();
  CHECK(after.pinned_allocations == backend.pinned_allocations);
  CHECK(after.synchronizations == backend.synchronizations);
  CHECK(arena.stats().allocations == 32);
  CHECK(read_back(buf.device(), s).front() == 999);
}
