// Tests for include/ferry/backend/stream.hpp: stream_ref, stream, enqueue_host, error surfacing.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <type_traits>

using namespace std::chrono_literals;

static_assert(std::is_trivially_copyable_v<ferry::stream_ref<ferry::backend::host>>);
static_assert(!std::is_constructible_v<ferry::stream_ref<ferry::backend::host>, std::nullptr_t>);
static_assert(!std::is_constructible_v<ferry::stream_ref<ferry::backend::host>, int>);
static_assert(std::is_base_of_v<ferry::stream_ref<ferry::backend::host>, ferry::stream<ferry::backend::host>>);
static_assert(!std::is_copy_constructible_v<ferry::stream<ferry::backend::host>>);
#if FERRY_HAS_CUDA
static_assert(std::is_trivially_copyable_v<ferry::stream_ref<ferry::backend::cuda>>);
static_assert(!std::is_constructible_v<ferry::stream_ref<ferry::backend::cuda>, std::nullptr_t>);
static_assert(!std::is_constructible_v<ferry::stream_ref<ferry::backend::cuda>, int>);
static_assert(std::is_constructible_v<ferry::stream_ref<ferry::backend::cuda>, cudaStream_t>);
static_assert(!std::is_convertible_v<cudaStream_t, ferry::stream_ref<ferry::backend::cuda>>);
#endif

// Waits (bounded) for a flag without any synchronizing call.
static bool eventually(const std::atomic<bool>& flag) {
  for (auto t0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - t0 < 10s;) {
    if (flag.load()) return true;
    std::this_thread::sleep_for(100us);
  }
  return false;
}

TEMPLATE_TEST_CASE("enqueue_host returns before the work runs and it runs on another thread",
                        "[stream]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry_test::gate<TestType> g(s);
  std::atomic<bool> ran{false};
  std::thread::id worker;
  ferry::enqueue_host(s, [&] {
    worker = std::this_thread::get_id();
    ran = true;
  });
  g.wait_entered();
  std::this_thread::sleep_for(5ms);  // give a wrong implementation time to run it anyway
  CHECK_FALSE(ran.load());           // held behind the gate: enqueue did not run it
  const auto syncs = ferry::backend_stats_of<TestType>().synchronizations;
  g.open();
  REQUIRE(eventually(ran));  // completes with no synchronizing call
  CHECK(ferry::backend_stats_of<TestType>().synchronizations == syncs);
  s.synchronize();
  CHECK(worker != std::this_thread::get_id());
}

TEMPLATE_TEST_CASE("stream work runs in order and synchronize() waits for all of it",
                        "[stream]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::vector<int> order;
  {
    ferry_test::gate<TestType> g(s);
    for (int i = 0; i < 100; ++i) ferry::enqueue_host(s, [&order, i] { order.push_back(i); });
    CHECK(order.empty());
  }  // the gate opens
  s.synchronize();
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
}

TEMPLATE_TEST_CASE("an error inside stream work surfaces once at the next synchronizing call",
                        "[stream]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  std::atomic<bool> later_ran{false};
  ferry::enqueue_host(s, [] { throw std::runtime_error("first failure"); });
  ferry::enqueue_host(s, [] { throw std::runtime_error("second failure"); });
  ferry::enqueue_host(s, [&] { later_ran = true; });
  CHECK_THROWS_AS(ferry::stream_ref<TestType>(s).synchronize(), ferry::error);
  ferry::enqueue_host(s, [] { throw std::runtime_error("first failure"); });
  ferry::enqueue_host(s, [] { throw std::runtime_error("second failure"); });
  REQUIRE_THROWS_WITH(s.synchronize(), Catch::Matchers::ContainsSubstring("first failure"));
  CHECK(later_ran.load());         // later work still ran
  CHECK_NOTHROW(s.synchronize());  // thrown once
}

TEMPLATE_TEST_CASE("a stream_ref names the same stream as its owner", "[stream]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> s;
  ferry::stream_ref<TestType> r = s;
  CHECK(r == s);
  ferry::stream<TestType> other;
  CHECK_FALSE(r == ferry::stream_ref<TestType>(other));
  std::atomic<int> n{0};
  ferry::enqueue_host(r, [&] { ++n; });
  s.synchronize();
  CHECK(n == 1);
}

TEMPLATE_TEST_CASE("a moved stream keeps its queue and the moved-from one is empty", "[stream]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> a;
  auto handle = a.get();
  ferry::stream<TestType> b(std::move(a));
  CHECK(b.get() == handle);
  CHECK(a.get() == nullptr);  // NOLINT(bugprone-use-after-move): documented moved-from state
  std::atomic<int> n{0};
  ferry::enqueue_host(b, [&] { ++n; });
  b.synchronize();
  CHECK(n == 1);
}

TEST_CASE("destroying a host stream drains its queue", "[stream]") {
  std::atomic<int> n{0};
  {
    ferry::stream<ferry::backend::host> s;
    for (int i = 0; i < 50; ++i)
      ferry::enqueue_host(s, [&] {
        std::this_thread::sleep_for(10us);
        ++n;
      });
  }
  CHECK(n == 50);
}
