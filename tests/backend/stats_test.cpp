// Tests for include/ferry/backend/stats.hpp: backend_stats::enqueues counts each operation ferry
// puts on a stream once, on both backends, and nothing that enqueues no work.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

template <class B>
std::uint64_t enqueues() {
  return ferry::backend_stats_of<B>().enqueues;
}

}  // namespace

TEMPLATE_TEST_CASE("backend_stats counts every operation ferry enqueues, once", "[stats]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  using B = TestType;
  // A mark is a counter read on the host backend and a cudaEventRecord on CUDA.
  constexpr std::uint64_t record_cost = std::is_same_v<B, ferry::backend::host> ? 0 : 1;
  ferry::stream<B> a;
  ferry::stream<B> b;
  std::atomic<int> ran{0};

  auto n = enqueues<B>();
  ferry::enqueue_host(a, [&] { ran.fetch_add(1); });
  CHECK(enqueues<B>() == n + 1);

  n = enqueues<B>();
  ferry::event<B> e;
  e.record(a);
  CHECK(enqueues<B>() == n + record_cost);

  // Asking, waiting and synchronizing enqueue nothing.
  a.synchronize();
  n = enqueues<B>();
  CHECK(e.ready());
  e.synchronize();
  a.synchronize();
  b.wait(e);  // passed already: nothing to wait for, on either backend
  CHECK(enqueues<B>() == n);
  CHECK(ran.load() == 1);

  // A copy between pinned and device memory is one enqueue (a pinned source is copied in place).
  const auto values = ferry_test::random_values<std::int32_t>(64, 1);
  ferry::pinned_arena<B> arena;
  ferry::device_buffer<std::int32_t, B> d(values.size());
  ferry::pinned_buffer<std::int32_t, B> h(values.size());
  ferry::pinned_buffer<std::int32_t, B> back(values.size());
  std::copy(values.begin(), values.end(), h.host().begin());
  n = enqueues<B>();
  ferry::async_h2d(h.host(), d.span(), a, arena);
  CHECK(enqueues<B>() == n + 1);
  ferry::async_d2h(ferry::device_span<const std::int32_t>(d.span()), back.host(), a);
  CHECK(enqueues<B>() == n + 2);
  a.synchronize();
  CHECK(std::vector<std::int32_t>(back.host().begin(), back.host().end()) == values);

  // A wait on a point not yet passed is one enqueue on the waiting stream (host: a task that
  // waits; CUDA: cudaStreamWaitEvent), plus the record that made the point.
  {
    ferry_test::gate<B> g(a);
    n = enqueues<B>();
    ferry::event<B> held;
    held.record(a);
    b.wait(held);
    CHECK(enqueues<B>() == n + record_cost + 1);
    g.open();
    b.synchronize();
    CHECK(held.ready());
  }
}
