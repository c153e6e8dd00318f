// Tests for include/ferry/backend/stream.hpp: stream_ref, stream, enqueue_host, error surfacing.
#include <support/backends.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <iterator>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;

static_assert(std::is_trivially_copyable_v<ferry::stream_ref<ferry::backend::host>>);
// 0, NULL and nullptr are rejected with one static_assert, "ferry has no default stream: pass a
// ferry::stream", by a constructor that exists only to say so (so is_constructible says true):
// tests/compile_fail/stream_ref_from_zero.cpp, stream_ref_from_nullptr.cpp, *_stream_zero.cpp.
static_assert(std::is_base_of_v<ferry::stream_ref<ferry::backend::host>, ferry::stream<ferry::backend::host>>);
static_assert(!std::is_copy_constructible_v<ferry::stream<ferry::backend::host>>);
// A host stream's queue is internal to ferry: its reference has no get() (CUDA's names the
// cudaStream_t, a public handle).
template <class S>
concept has_get = requires(const S& s) { s.get(); };
static_assert(!has_get<ferry::stream_ref<ferry::backend::host>>);
static_assert(!has_get<ferry::stream<ferry::backend::host>>);
#if FERRY_HAS_CUDA
static_assert(std::is_trivially_copyable_v<ferry::stream_ref<ferry::backend::cuda>>);
static_assert(std::is_constructible_v<ferry::stream_ref<ferry::backend::cuda>, cudaStream_t>);
static_assert(has_get<ferry::stream_ref<ferry::backend::cuda>>);
static_assert(!std::is_convertible_v<cudaStream_t, ferry::stream_ref<ferry::backend::cuda>>);
#endif

#if FERRY_HAS_CUDA
// No GPU needed: the handle is checked before any CUDA call.
TEST_CASE("stream_ref<cuda> from a null cudaStream_t throws: ferry has no default stream", "[stream]") {
  cudaStream_t handle = nullptr;  // a variable holding 0 compiles; the call is rejected at run time
  CHECK_THROWS_MATCHES(ferry::stream_ref<ferry::backend::cuda>(handle), ferry::error,
                       Catch::Matchers::MessageMatches(Catch::Matchers::StartsWith("ferry: ") &&
                                                       Catch::Matchers::ContainsSubstring(
                                                           "ferry has no default stream: pass a ferry::stream")));
  CHECK_THROWS_AS(ferry::stream_ref<ferry::backend::cuda>::identified(handle), ferry::error);
  // The default streams by name stay accepted, without a CUDA call.
  CHECK(ferry::stream_ref<ferry::backend::cuda>(cudaStreamLegacy).get() == cudaStreamLegacy);
  CHECK(ferry::stream_ref<ferry::backend::cuda>(cudaStreamPerThread).get() == cudaStreamPerThread);
}
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
  const ferry::stream_ref<TestType> original = a;
  ferry::stream<TestType> b(std::move(a));
  CHECK(ferry::stream_ref<TestType>(b) == original);
  // NOLINTNEXTLINE(bugprone-use-after-move): documented moved-from state
  CHECK_THROWS_AS(a.synchronize(), ferry::error);
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

TEMPLATE_TEST_CASE("every call on a moved-from stream throws and changes nothing", "[stream]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  ferry::stream<TestType> dead;
  ferry::stream<TestType> live(std::move(dead));
  ferry_test::gate<TestType> g(live);
  ferry::event<TestType> e;
  e.record(live);  // not ready: the gate holds `live`
  std::atomic<bool> ran{false};
  const auto check = [&](const ferry::stream_ref<TestType> r) {
    const std::string empty = "ferry: the stream is empty (a moved-from stream)";
    CHECK_THROWS_WITH(r.synchronize(), empty);
    CHECK_THROWS_WITH(ferry::enqueue_host(r, [&] { ran = true; }), empty);
    CHECK_THROWS_WITH(e.record(r), empty);
    CHECK_THROWS_WITH(r.wait(e), empty);
  };
  check(dead);  // NOLINT(bugprone-use-after-move): the moved-from state is what is tested
  const ferry::stream_ref<TestType> ref = dead;  // NOLINT(bugprone-use-after-move)
  check(ref);
  CHECK_THROWS_AS(dead.synchronize(), ferry::error);  // NOLINT(bugprone-use-after-move)
  CHECK_FALSE(e.ready());  // the failed record left the event on `live`
  g.open();
  e.synchronize();
  live.synchronize();
  CHECK_FALSE(ran.load());
}

TEMPLATE_TEST_CASE("destroying a stream counts the error no synchronizing call took", "[stream]",
                   FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  const std::uint64_t before = ferry::swallowed_errors();
  ferry::event<TestType> after_failure;
  {
    ferry::stream<TestType> s;
    ferry::enqueue_host(s, [] { throw std::runtime_error("never synchronized"); });
    ferry::enqueue_host(s, [] { throw std::runtime_error("never synchronized either"); });
    after_failure.record(s);
  }
  CHECK_NOTHROW(after_failure.synchronize());      // the errors went with their stream ...
  CHECK(ferry::swallowed_errors() == before + 1);  // ... counted: the one a synchronize would throw
  ferry::stream<TestType> next;                    // may reuse the destroyed stream's handle
  CHECK_NOTHROW(next.synchronize());
  {
    ferry::stream<TestType> s;
    ferry::enqueue_host(s, [] { throw std::runtime_error("synchronized"); });
    CHECK_THROWS_AS(s.synchronize(), ferry::error);
  }
  CHECK(ferry::swallowed_errors() == before + 1);  // taken, so not swallowed
}

static std::size_t threads_alive() {
  const std::filesystem::directory_iterator tasks("/proc/self/task");
  return static_cast<std::size_t>(std::distance(begin(tasks), end(tasks)));
}

TEMPLATE_TEST_CASE("a destroyed stream leaves no worker behind and its events read as passed",
                   "[stream]", FERRY_TEST_BACKENDS) {
  FERRY_REQUIRE_BACKEND(TestType);
  std::uint64_t seed = 7;
  const auto cycle = [&] {
    ferry::stream<TestType> s;
    const auto v = ferry_test::random_values<std::int32_t>(64, seed++);
    ferry::device_buffer<std::int32_t, TestType> d(v.size());
    ferry::async_h2d(v, d.span(), s);  // the default arena's block, stamped by the reuse core
    ferry::pinned_buffer<std::int32_t, TestType> back(v.size());
    ferry::async_d2h(ferry::device_span<const std::int32_t>(d.span()), back.host(), s);
    s.synchronize();
    REQUIRE(std::equal(v.begin(), v.end(), back.host().begin()));
  };
  cycle();  // first use: the default arena and the runtime's own threads
  const std::size_t threads = threads_alive();
  for (int i = 0; i < 200; ++i) cycle();
  CHECK(threads_alive() <= threads + 2);

  // Events outlive their streams without keeping their workers.
  std::vector<ferry::event<TestType>> events(200);
  for (auto& e : events) {
    ferry::stream<TestType> s;
    e.record(s);
  }
  CHECK(threads_alive() <= threads + 2);
  for (auto& e : events) {
    e.synchronize();
    CHECK(e.ready());
  }
}

#if FERRY_HAS_CUDA
TEST_CASE("a CUDA stream's references carry its id and device; identified() looks them up once",
          "[stream]") {
  FERRY_REQUIRE_BACKEND(ferry::backend::cuda);
  using ref = ferry::stream_ref<ferry::backend::cuda>;
  const auto id_of = [](cudaStream_t h) {  // 0 if the call fails (no assertion: used off-thread)
    unsigned long long id = 0;
    return cudaStreamGetId(h, &id) == cudaSuccess ? id : 0ULL;
  };
  int device = -1;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  ferry::stream<ferry::backend::cuda> a;
  const ref r = a;
  CHECK(r.id() == id_of(a.get()));
  CHECK(r.device() == device);
  CHECK(ref(a.get()).id() == r.id());  // a bare handle looks it up
  CHECK(ref::identified(a.get()).id() == r.id());
  CHECK(ref::identified(a.get()).device() == device);

  // A moved stream keeps its identity; another stream has another.
  ferry::stream<ferry::backend::cuda> b(std::move(a));
  CHECK(ref(b).id() == r.id());
  ferry::stream<ferry::backend::cuda> c;
  CHECK(ref(c).id() != r.id());
  b = std::move(c);
  CHECK(ref(b).id() == id_of(b.get()));
  CHECK(ref(b).id() != r.id());

  // The per-thread default stream carries nothing: each thread's reference names its own stream.
  const ref per_thread = ref::identified(cudaStreamPerThread);
  const unsigned long long here = per_thread.id();
  unsigned long long there = 0, there_raw = 0;
  std::thread([&] {
    there = per_thread.id();
    there_raw = id_of(cudaStreamPerThread);
  }).join();
  CHECK(there_raw != 0);
  CHECK(there == there_raw);
  CHECK(there != here);
  CHECK_THROWS_WITH(ref::identified(nullptr),
                    Catch::Matchers::ContainsSubstring("ferry has no default stream: pass a ferry::stream"));
}
#endif

TEST_CASE("stream_ref<> and stream<> name the default backend", "[stream]") {
  STATIC_REQUIRE(std::is_same_v<ferry::stream_ref<>, ferry::stream_ref<ferry::default_backend>>);
  STATIC_REQUIRE(std::is_same_v<ferry::stream<>, ferry::stream<ferry::default_backend>>);
  STATIC_REQUIRE(std::is_convertible_v<ferry::stream<>&, ferry::stream_ref<>>);
}
